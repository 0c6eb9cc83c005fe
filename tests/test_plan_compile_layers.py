"""train.py's compiled layers as a lever: asked for (--compile-layers), priced from the probe's compiled MoE layer rows
and written into the launch line, refused in one line where it cannot run; left to the planner, taken where predicted
faster and only where it was measured (train.py, full or LoRA, DDP, an MoE with compiled layer rows)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from generator.cli import main
from generator.model import spec_from_config
from generator.model.presets import preset_config
from generator.plan.planner import make_plan
from generator.plan.types import PlanRequest
from generator.topology.machines import load_machine


def _plan(capsys, tmp_path, *extra: str) -> dict:
    argv = ["plan", "--model", "mixtral-8x7b", "--machine", "h200-sxm-2", "--num-gpus", "1", "--method", "lora",
            "--seq-len", "4096", "--no-liger", "--output", str(tmp_path / "c.yaml"), "--force", "--json",
            *extra]  # fmt: skip
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_compiled_layers_are_priced_from_the_compiled_rows_and_launched_with_the_flag(capsys, tmp_path):
    eager = _plan(capsys, tmp_path, "--precision", "bf16", "--no-compile-layers")
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


def test_left_to_the_planner_compiled_layers_are_taken_where_faster_and_opted_out_of_in_one_flag(capsys, tmp_path):
    """A dense LoRA plan in bf16: both estimated, compiled taken (its reason names the eager twin and the measured
    pairs), the flag in the launch line; --no-compile-layers gives the eager twin's prediction and no flag."""
    auto = _plan(capsys, tmp_path, "--model", "llama-3-8b", "--precision", "bf16")
    eager = _plan(capsys, tmp_path, "--model", "llama-3-8b", "--precision", "bf16", "--no-compile-layers")
    assert "--compile-layers" in auto["launch_command"] and "--compile-layers" not in eager["launch_command"]
    (line,) = [r for r in auto["reasons"] if r.startswith("compiled layers (chosen")]
    assert f"vs {eager['chosen']['tokens_per_s_per_gpu']:,.0f} eager" in line and "--no-compile-layers" in line
    assert auto["chosen"]["tokens_per_s_per_gpu"] > 1.1 * eager["chosen"]["tokens_per_s_per_gpu"]
    # a strategy it was not measured under is compared as it would run, eager: fsdp's row is the eager plan's
    fsdp = {e["strategy"]: e for e in eager["estimates"]}["fsdp"]
    assert {e["strategy"]: e for e in auto["estimates"]}["fsdp"] == fsdp
    assert not any(r.startswith("fsdp not applicable") for r in auto["reasons"])


@pytest.mark.parametrize("extra", [
    ("--script", "trainer"),  # no per-layer compile switch in TRL's CLI
    ("--script", "custom"),
    ("--method", "qlora"),  # NF4 layers: not measured compiled
    ("--strategy", "zero2"),
])  # fmt: skip
def test_the_planner_never_offers_compiled_layers_where_they_were_not_measured(capsys, tmp_path, extra):
    plan = _plan(capsys, tmp_path, "--model", "llama-3-8b", "--precision", "bf16", *extra)
    assert "--compile-layers" not in plan["launch_command"]
    assert not any(r.startswith("compiled layers") for r in plan["reasons"])


def test_an_moe_without_compiled_layer_rows_is_not_compiled_by_the_planner():
    """Mixtral's compiled layer rows are in the shipped table: the planner may take them. The same architecture at
    widths no row has would be priced from operators (a quarter or more off for an MoE): only eager is offered."""
    machine = load_machine("h200-sxm-2")
    request = PlanRequest(method="lora", seq_len=4096, num_gpus=1, precision="bf16", liger=False)
    mixtral = spec_from_config({k: v for k, v in preset_config("mixtral-8x7b").items() if not k.startswith("_")},
                               "mixtral-8x7b")  # fmt: skip
    unprobed = spec_from_config({**preset_config("mixtral-8x7b"), "intermediate_size": 8192}, "mixtral-f8192")
    assert make_plan(machine, mixtral, request).workload.compiled_layers
    plan = make_plan(machine, unprobed, request)
    assert not plan.workload.compiled_layers
    assert not any(r.startswith("compiled layers") for r in plan.reasons)


def test_an_moe_without_layer_rows_is_not_taken_to_float8_by_the_planner():
    """float8 compiles the layers too, so --precision auto does not take it on an operators-only price either: the
    unprobed Mixtral stays bf16 and eager, and the lever line says why and how to time its layers, with what
    --precision fp8 is predicted to give; asked for, fp8 still runs there."""
    machine = load_machine("h200-sxm-2")
    request = PlanRequest(method="lora", seq_len=4096, num_gpus=1, liger=False, fp8_installed=True)
    unprobed = spec_from_config({**preset_config("mixtral-8x7b"), "intermediate_size": 8192}, "mixtral-f8192")
    plan = make_plan(machine, unprobed, request)
    assert plan.workload.precision == "bf16" and not plan.workload.compiled_layers
    (line,) = [r for r in plan.levers if r.startswith("fp8 not chosen")]
    assert "priced from their operators" in line and "probe --compute --full --model mixtral-f8192" in line
    assert "with --precision fp8" in line
    asked = make_plan(machine, unprobed, replace(request, precision="fp8"))
    assert asked.workload.precision == "fp8"


def test_a_host_bound_eager_step_names_compiled_layers_only_where_the_script_has_them(capsys, tmp_path):
    """Llama-3-8B LoRA at 2,048 x 1 is host-bound eager (measured 9,078 tokens/s eager, 14,846 compiled)."""
    short = ("--model", "llama-3-8b", "--precision", "bf16", "--seq-len", "2048", "--micro-batch", "1",
             "--global-batch", "1")  # fmt: skip
    eager = _plan(capsys, tmp_path, *short, "--no-compile-layers")
    (line,) = [r for r in eager["reasons"] if r.startswith("host-bound")]
    assert "--compile-layers" in line
    trl = _plan(capsys, tmp_path, *short, "--script", "trainer")
    (trl_line,) = [r for r in trl["reasons"] if r.startswith("host-bound")]  # TRL's step is host-bound too
    assert "--compile-layers" not in trl_line
