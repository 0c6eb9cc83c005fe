"""A plan whose step is host-bound says so (the CPU issuing the kernels sets its speed, and that speed moves between
machines of one kind), and one the GPU sets says nothing; the JSON carries the same verdict."""

import json

import pytest

from generator.cli import main


def _plan(capsys, *flags: str, model: str = "mistral-7b") -> dict:
    argv = ["plan", "--model", model, "--machine", "h200-sxm-2", "--num-gpus", "1", "--method", "lora",
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


@pytest.mark.parametrize("model, own_missing", [("qwen2.5-7b", True), ("mistral-7b", False)])
def test_a_host_priced_from_the_mistral_layer_says_how_to_time_the_models_own(capsys, model, own_missing):
    """The shipped table's host rows time a Mistral layer: a host-bound plan of another model names the probe that
    times its own layer; Mistral's says nothing of it."""
    short = ("--seq-len", "1024", "--micro-batch", "1", "--global-batch", "1", "--no-compile-layers")
    (said,) = [r for r in _plan(capsys, *short, model=model)["reasons"] if r.startswith("host-bound:")]
    assert (f"probe --compute --model {model}" in said) is own_missing
    assert ("priced from the Mistral layer's rows" in said) is own_missing


def test_a_host_bound_full_fine_tune_names_the_tail_the_host_cannot_hide(capsys):
    """Clipping and the optimizer's update run after the host has issued the rest: a host-bound full fine-tune's
    line names their time (its step is the host's plus theirs); LoRA's adapters' update is too small to name."""
    short = ("--seq-len", "1024", "--micro-batch", "1", "--global-batch", "1", "--no-compile-layers")
    full = _plan(capsys, "--method", "full", *short, model="bench/models/llama-3.2-3b.json")
    chosen = full["chosen"]
    (said,) = [r for r in full["reasons"] if r.startswith("host-bound:")]
    assert chosen["tail_s"] > 0.01 and f"issued last, run {chosen['tail_s']:.2f} s" in said
    assert chosen["step_s"] == pytest.approx(chosen["host_s"] + chosen["tail_s"], rel=0.05)
    (lora,) = [r for r in _plan(capsys, *short)["reasons"] if r.startswith("host-bound:")]
    assert "issued last" not in lora
