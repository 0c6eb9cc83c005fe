"""A plan whose step is host-bound says so (the CPU issuing the kernels sets its speed, and that speed moves between
machines of one kind), and one the GPU sets says nothing; the JSON carries the same verdict."""

import json

import pytest

from generator.cli import main


def _plan(capsys, *flags: str) -> dict:
    argv = ["plan", "--model", "mistral-7b", "--machine", "h200-sxm-2", "--num-gpus", "1", "--method", "lora",
            *flags, "--json"]  # fmt: skip
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("flags, bound", [
    (("--seq-len", "1024", "--micro-batch", "1", "--global-batch", "1"), True),
    ((), False),
])  # fmt: skip
def test_a_host_bound_plan_names_its_cpu_and_gpu_time(capsys, flags, bound):
    plan = _plan(capsys, *flags)
    chosen = plan["chosen"]
    said = [r for r in plan["reasons"] if r.startswith("host-bound:")]
    assert chosen["host_bound"] is bound and len(said) == int(bound)
    if bound:
        assert chosen["host_s"] > 0 and f"{chosen['host_s']:.2f} s a step" in said[0]
        assert "probe --compute" in said[0]
