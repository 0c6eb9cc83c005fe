"""The bench's two user-style scripts (bench/scripts/plain_loop.py, bench/scripts/trl_sft.py) under `accelerate launch`
with a 2-process DDP config written by `python -m generator plan` (for LoRA: full Mistral-7B under DDP does not fit an
H200, so that plan would pick one GPU). They train a tiny Mistral on CPU (DDP over gloo), write the per-step log the
bench reads, and record the defaults docs/scripts.md states, read off the live objects.

FSDP2 is not run here: without a GPU the scripts (like train.py) pass cpu=True and Accelerate runs an FSDP config as
DDP over gloo, which has no reduce-scatter for FSDP2; the GPU bench runs those configs.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.emit_harness import free_port
from tests.teardown_probe import CLEAN, alive_at_end_training, probe_env

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "recipes" / "data" / "synthetic_instruct.jsonl"
SEQ, MB, GLOBAL, STEPS = 64, 2, 8, 3  # 2 processes x micro-batch 2 x 2 accumulation steps = 8 sequences
STEP_FIELDS = {
    "step",
    "loss",
    "step_time_s",
    "tokens_per_s_per_gpu",
    "mfu",
    "max_mem_allocated_gb",
    "max_mem_reserved_gb",
}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    from tests.tiny_model import build_tiny_mistral

    root = tmp_path_factory.mktemp("scripts")
    build_tiny_mistral(root / "tiny")
    plan = [sys.executable, "-m", "generator", "plan", "--model", "mistral-7b", "--machine", "h200-sxm-2",
            "--strategy", "ddp", "--method", "lora", "--num-gpus", "2", "--output", str(root / "ddp.yaml"),
            "--force"]  # fmt: skip
    subprocess.run(plan, cwd=ROOT, check=True, capture_output=True, timeout=60)
    text = (root / "ddp.yaml").read_text()
    assert re.search(r"^distributed_type: MULTI_GPU$", text, re.M) and re.search(r"^num_processes: 2$", text, re.M)
    # a fixed port would collide with other test runs on the machine
    (root / "ddp.yaml").write_text(
        re.sub(r"^main_process_port: \d+$", f"main_process_port: {free_port()}", text, flags=re.M)
    )
    return root


def launch(work: Path, script: str, out: Path, *extra: str, **extra_env: str) -> subprocess.CompletedProcess:
    args = ["--model", str(work / "tiny"), "--init", "random", "--dataset", str(DATA), "--seq-len", str(SEQ),
            "--micro-batch", str(MB), "--global-batch", str(GLOBAL), "--max-steps", str(STEPS), "--lr", "3e-3",
            "--output-dir", str(out), *extra]  # fmt: skip
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(work / "ddp.yaml"), script, *args]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    env["HF_DATASETS_CACHE"] = str(work / "datasets_cache")
    env.update(extra_env)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]


def check_bench_log(out: Path) -> dict:
    """The log is what read_steps / summarise_log consume; returns the start record."""
    from bench.run_matrix import summarise_log
    from generator.trial.metrics import read_steps

    recs = records(out)
    start, summary = recs[0], recs[-1]
    assert start["event"] == "start" and summary["event"] == "summary"
    steps = read_steps(out / "steps.jsonl")
    assert [s["step"] for s in steps] == list(range(1, STEPS + 1))
    for s in steps:
        assert set(s) >= STEP_FIELDS and math.isfinite(s["loss"]) and s["step_time_s"] > 0
        # tokens per GPU per step = micro-batch x accumulation x seq-len, all real tokens (full packed blocks)
        # the log rounds step_time_s to 0.1 ms, tokens/s is from the unrounded time: their product is off by at most
        # tokens/s x 0.05 ms (a fast CPU step of ~20 ms made that 0.2%, past the former relative tolerance)
        rounding = s["tokens_per_s_per_gpu"] * 0.5e-4
        assert s["tokens_per_s_per_gpu"] * s["step_time_s"] == pytest.approx(MB * 2 * SEQ, abs=rounding + 1e-6)
        assert s["max_mem_allocated_gb"] is None and s["max_mem_reserved_gb"] is None and s["mfu"] is None  # CPU
    assert summarise_log(out / "steps.jsonl")["steps"] == STEPS
    assert summary["steps"] == STEPS and summary["final_loss"] == steps[-1]["loss"]
    assert (start["world_size"], start["grad_accum"]) == (2, 2)
    assert start["distributed_type"] == "DistributedType.MULTI_CPU"  # two gloo workers, not two lone trainers
    return start


def test_plain_loop_keeps_torch_and_accelerate_defaults(work):
    out = work / "plain"
    launch(work, "bench/scripts/plain_loop.py", out, **probe_env(work / "teardown", "plain_loop.py"))
    start = check_bench_log(out)
    assert alive_at_end_training(work / "teardown") == {"rank0": CLEAN, "rank1": CLEAN}  # tests/teardown_probe.py
    # Accelerate's DistributedDataParallelKwargs defaults reach DDP unchanged
    assert start["ddp"] == {"find_unused_parameters": False, "gradient_as_bucket_view": False, "bucket_cap_mb": 25.0,
                            "broadcast_buffers": True, "static_graph": False}  # fmt: skip
    # torch.optim.AdamW(model.parameters(), lr=...): neither flag given (torch picks foreach on CUDA; for-loop on CPU)
    assert (start["fused"], start["foreach"], start["adamw_impl"]) == (None, None, "for-loop")
    assert start["weight_decay"] == [0.01] and len(start["param_group_sizes"]) == 1
    assert start["trainable_param_dtypes"] == ["bfloat16"] and start["mixed_precision"] == "bf16"  # pure bf16 AdamW


def test_trl_sft_full_uses_fused_adamw_and_checkpointing(work):
    out = work / "sft_full"
    launch(work, "bench/scripts/trl_sft.py", out, **probe_env(work / "teardown_trl_full", "trl_sft.py"))
    start = check_bench_log(out)
    assert alive_at_end_training(work / "teardown_trl_full") == {"rank0": CLEAN, "rank1": CLEAN}
    assert start["optim"] == "OptimizerNames.ADAMW_TORCH_FUSED" and (start["fused"], start["adamw_impl"]) == (
        True,
        "fused",
    )
    assert start["weight_decay"] == [0.0, 0.0]  # Trainer's decay / no-decay groups, TrainingArguments.weight_decay 0
    assert start["grad_checkpointing"] is True and start["padding_free"] is True  # SFTConfig's default; our packing
    # Trainer turns find_unused_parameters off only because checkpointing is on; the rest are torch's defaults
    assert start["ddp"]["find_unused_parameters"] is False and start["ddp"]["gradient_as_bucket_view"] is False
    assert start["trainable_param_dtypes"] == ["float32"]  # a fp32 load under bf16 autocast: fp32 masters


def test_trl_sft_lora_ddp_finds_unused_parameters(work):
    out = work / "sft_lora"
    probe = work / "teardown_trl"
    launch(work, "bench/scripts/trl_sft.py", out, "--method", "lora", "--lora-r", "4", "--load-dtype", "bf16",
           **probe_env(probe, "trl_sft.py"))  # fmt: skip
    start = check_bench_log(out)
    assert alive_at_end_training(probe) == {"rank0": CLEAN, "rank1": CLEAN}  # an abort at exit in CI otherwise
    # a PeftModel is not a PreTrainedModel, so the Trainer's default is find_unused_parameters=True for LoRA
    assert start["ddp"]["find_unused_parameters"] is True
    assert start["frozen_param_dtypes"] == ["bfloat16"] and start["trainable_param_dtypes"] == ["float32"]
    assert 0 < start["param_group_sizes"][0] < 10_000  # only the adapters are in the optimizer


@pytest.mark.parametrize("script", ["bench/scripts/plain_loop.py", "bench/scripts/trl_sft.py"])
def test_indivisible_global_batch_is_one_line_and_exit_2(work, script):
    cmd = [sys.executable, script, "--model", str(work / "tiny"), "--micro-batch", "2", "--global-batch", "7"]
    proc = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, env=dict(os.environ, WORLD_SIZE="1")
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "--global-batch 7 is not divisible" in proc.stderr
