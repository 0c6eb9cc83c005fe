"""Calibration corrections are keyed by the whole workload (issue 18): a LoRA trial's correction must not reach a full
fine-tune plan, and a plan says which correction it applied."""

from __future__ import annotations

import json

import pytest

from generator.cli import main
from generator.trial.calibration import calibration_key, factors, seq_bucket

BASE = ["plan", "--model", "mistral-7b", "--machine", "h200-sxm-2", "--num-gpus", "1", "--strategy", "fsdp",
        "--seq-len", "4096", "--grad-checkpointing", "on", "--attention", "sdpa", "--json"]  # fmt: skip
LORA_TRIAL = {"device": "cuda", "status": "ok", "gpu_name": "NVIDIA H200", "strategy": "fsdp", "method": "lora",
              "seq_len": 4096, "attention": "sdpa", "liger": False, "script": "train.py",
              "predicted_tokens_per_s_per_gpu": 1000.0, "measured_tokens_per_s_per_gpu": 1130.0}  # fmt: skip


def plan_json(capsys, *extra, cal) -> dict:
    assert main([*BASE, *extra, "--calibration-file", str(cal)]) == 0
    return json.loads(capsys.readouterr().out)["chosen"]


def test_lora_trial_correction_is_not_applied_to_a_full_fine_tune(tmp_path, capsys):
    cal = tmp_path / "cal.json"
    raw_full = plan_json(capsys, cal=cal)
    raw_lora = plan_json(capsys, "--method", "lora", cal=cal)
    cal.write_text(json.dumps({"version": 1, "measurements": [LORA_TRIAL]}))
    assert plan_json(capsys, cal=cal)["tokens_per_s_per_gpu"] == raw_full["tokens_per_s_per_gpu"]
    lora = plan_json(capsys, "--method", "lora", cal=cal)
    assert lora["tokens_per_s_per_gpu"] == pytest.approx(1.13 * raw_lora["tokens_per_s_per_gpu"], rel=1e-3)
    assert any("x1.13" in n and "lora" in n and "train.py" in n for n in lora["notes"])


def test_a_trial_corrects_only_its_script_and_sequence_bucket(tmp_path, capsys):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"version": 1, "measurements": [{**LORA_TRIAL, "method": "full"}]}))
    raw = plan_json(capsys, "--script", "custom", cal=tmp_path / "none.json")
    assert plan_json(capsys, "--script", "custom", cal=cal)["tokens_per_s_per_gpu"] == raw["tokens_per_s_per_gpu"]
    longer = plan_json(capsys, "--seq-len", "16384", cal=tmp_path / "none.json")
    assert plan_json(capsys, "--seq-len", "16384", cal=cal)["tokens_per_s_per_gpu"] == longer["tokens_per_s_per_gpu"]


def test_keys_and_buckets():
    assert (seq_bucket(4096), seq_bucket(4097), seq_bucket(3000)) == (4096, 8192, 4096)
    old = {"device": "cuda", "status": "ok", "gpu_name": "G", "strategy": "ddp", "seq_len": 2048,
           "predicted_tokens_per_s_per_gpu": 10.0, "measured_tokens_per_s_per_gpu": 9.0}  # fmt: skip
    from generator.estimate.types import Workload

    # a record from before the workload fields counts as full, SDPA, no Liger, train.py
    assert factors([old]) == {calibration_key("G", "ddp", Workload(seq_len=2048)): pytest.approx(0.9)}
