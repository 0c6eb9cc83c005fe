"""fp8 as a planned precision lever (issue 20): predicted faster than bf16 on an H200, refused in one line where the
GPU has no fp8, shown as a lever (never chosen) by default, written as train.py --precision fp8 in a bf16 YAML that
accelerate loads, and read back by `check`."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from generator.cli import main
from generator.estimate import Placement, Workload, estimate
from generator.estimate.precision import fp8_matmul_params, fp8_supported
from generator.model import load_model

H200 = ["plan", "--model", "mistral-7b", "--machine", "h200-sxm-2", "--num-gpus", "1", "--json"]


def _plan(capsys, *extra) -> dict:
    assert main([*H200, *extra]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("seq", [4096, 8192])
def test_fp8_predicted_faster_than_bf16_on_h200_with_the_ratio_in_the_reasons(capsys, seq):
    bf16 = _plan(capsys, "--seq-len", str(seq))
    fp8 = _plan(capsys, "--seq-len", str(seq), "--precision", "fp8")
    ratio = fp8["chosen"]["tokens_per_s_per_gpu"] / bf16["chosen"]["tokens_per_s_per_gpu"]
    assert ratio > 1.1
    line = next(r for r in fp8["reasons"] if r.startswith("precision fp8"))
    assert "x)" in line and "predicted only" in line
    # the bf16 plan names the same lever with its predicted gain, outside the reasons the header records
    lever = next(r for r in bf16["levers"] if r.startswith("fp8 not chosen"))
    assert "predicted only" in lever and not any("fp8" in r for r in bf16["reasons"])


def test_fp8_same_row_faster_and_mfu_stays_bf16_equivalent():
    model = load_model("mistral-7b")
    placement = Placement(1, "NVIDIA H200", 150.75, 0.0)
    w = Workload(seq_len=4096, load_dtype="bf16", grad_checkpointing=False)
    a, b = estimate(model, w, placement, "ddp"), estimate(model, replace(w, precision="fp8"), placement, "ddp")
    assert b.tokens_per_s_per_gpu > a.tokens_per_s_per_gpu
    # same FLOPs per token over the same bf16 peak: MFU moves exactly with tokens/s
    assert b.mfu / a.mfu == pytest.approx(b.tokens_per_s_per_gpu / a.tokens_per_s_per_gpu)
    assert "fp8_weight_copies" in b.breakdown and "fp8_weight_copies" not in a.breakdown
    # lm_head stays bf16: fewer fp8 matmul parameters than the active ones
    assert fp8_matmul_params(model) == model.matmul_params_active - model.vocab_size * model.hidden_size


def test_fp8_halves_the_fsdp2_all_gather_of_the_linear_weights():
    from generator.estimate.comm import communication

    model = load_model("mistral-7b")
    placement = Placement(2, "NVIDIA H200", 150.75, 338.0)
    w = Workload(seq_len=4096)
    bf16 = communication(model, w, placement, "fsdp")
    fp8 = communication(model, replace(w, precision="fp8"), placement, "fsdp")
    assert 0.6 * bf16.bus_bytes < fp8.bus_bytes < 0.9 * bf16.bus_bytes


@pytest.mark.parametrize("gpu", ["A100", "T4"])
def test_fp8_refused_in_one_line_without_fp8_tensor_cores(capsys, gpu):
    assert not fp8_supported(gpu)
    rc = main(["plan", "--model", "mistral-7b", "--gpu", gpu, "--num-gpus", "1", "--precision", "fp8"])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and len(err.splitlines()) == 1
    assert "fp8 tensor cores" in err and "--precision bf16" in err


def test_bf16_plan_on_a100_says_why_fp8_is_not_offered(capsys):
    argv = ["plan", "--model", "mistral-7b", "--gpu", "A100", "--method", "lora", "--num-gpus", "1", "--json"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert any(r.startswith("fp8 not offered") and "Ampere" in r for r in d["levers"])


def test_fp8_config_loads_through_accelerate_and_check_reads_it(tmp_path, capsys, monkeypatch):
    from tests.emit_harness import check_three_levels

    monkeypatch.chdir(tmp_path)
    out = "fp8.yaml"
    assert main([*H200[:-1], "--precision", "fp8", "--output", out]) == 0
    command = capsys.readouterr().out
    assert "--precision fp8" in command
    text = (tmp_path / out).read_text()
    assert "PREDICTED, NOT MEASURED" in text
    raw = check_three_levels(out)
    assert raw["mixed_precision"] == "bf16"  # train.py applies float8 itself (docs/fp8.md)
    main(["check", out, "--machine", "h200-sxm-2", "--script", "train.py"])
    assert "--precision fp8" in capsys.readouterr().out
    assert main(["check", out, "--gpu", "A100", "--script", "train.py"]) != 0
    assert "fp8 needs fp8 tensor cores" in capsys.readouterr().out


def test_an_fp8_fsdp2_config_passes_train_pys_own_fp8_checks(tmp_path, capsys, monkeypatch):
    """The YAML plan writes for fp8 under FSDP2 must not be refused by train.py --precision fp8 in the child the
    launcher starts (accelerate 1.15's torchao backend raises under fsdp_cpu_ram_efficient_loading)."""
    pytest.importorskip("torchao")
    import torch

    from tests.emit_harness import child_environ, launch_level2
    from training import precision

    monkeypatch.chdir(tmp_path)
    argv = ["plan", "--model", "mistral-7b", "--machine", "h200-sxm-2", "--num-gpus", "2", "--strategy", "fsdp"]
    assert main([*argv, "--precision", "fp8", "--output", "fp8.yaml"]) == 0
    capsys.readouterr()
    _, env = launch_level2("fp8.yaml")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # an H200 stands in: capability 9.0
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    with child_environ(env):
        assert precision.launch_uses_fsdp2()
        precision.check_fp8("full")  # raises UserError if the config is one train.py refuses
