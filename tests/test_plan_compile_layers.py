"""plan --compile-layers: train.py's bf16 layers compiled, priced from the probe's compiled MoE layer rows, written
into the launch line; refused in one line where it cannot run (another script, a DeepSpeed strategy)."""

from __future__ import annotations

import json

import pytest

from generator.cli import main


def _plan(capsys, tmp_path, *extra: str) -> dict:
    argv = ["plan", "--model", "mixtral-8x7b", "--machine", "h200-sxm-2", "--num-gpus", "1", "--method", "lora",
            "--seq-len", "4096", "--no-liger", "--output", str(tmp_path / "c.yaml"), "--force", "--json",
            *extra]  # fmt: skip
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_compiled_layers_are_priced_from_the_compiled_rows_and_launched_with_the_flag(capsys, tmp_path):
    eager = _plan(capsys, tmp_path, "--precision", "bf16")
    compiled = _plan(capsys, tmp_path, "--precision", "bf16", "--compile-layers")
    assert compiled["chosen"]["tokens_per_s_per_gpu"] > 1.2 * eager["chosen"]["tokens_per_s_per_gpu"]
    assert "--compile-layers" in compiled["launch_command"] and "--compile-layers" not in eager["launch_command"]
    assert any(line.startswith("compiled layers (--compile-layers") for line in compiled["reasons"])
    assert all(e["strategy"] not in ("zero2", "zero3") for e in compiled["estimates"])  # DeepSpeed: not offered
    # float8 compiles its layers itself: one flag, --precision fp8
    fp8 = _plan(capsys, tmp_path, "--precision", "fp8", "--compile-layers")
    assert "--precision fp8" in fp8["launch_command"] and "--compile-layers" not in fp8["launch_command"]


@pytest.mark.parametrize(("extra", "says"), [
    (("--script", "trainer"), "does not apply to --script trainer"),
    (("--strategy", "zero2"), "does not run with --strategy zero2"),
])  # fmt: skip
def test_compile_layers_where_it_cannot_run_is_one_line(capsys, tmp_path, extra, says):
    argv = ["plan", "--model", "mixtral-8x7b", "--machine", "h200-sxm-2", "--method", "lora", "--compile-layers",
            "--output", str(tmp_path / "c.yaml"), *extra]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and not (tmp_path / "c.yaml").exists()
