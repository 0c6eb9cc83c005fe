"""The launch line `plan` prints in the launched script's own terms (issue 25): TRL's CLI flags for --script trainer,
the user's loop and its settings for --script custom, and no lever the script cannot pull, on every bundled machine.
Then the printed TRL line itself runs TRL's own `trl.scripts.sft` on CPU on a tiny model for a few steps (placeholders
filled in as a user would, bf16 swapped for CPU), through the bench's step-log hook."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MACHINES = sorted(p.stem for p in (ROOT / "generator" / "machines").glob("*.txt"))
TRAIN_PY_ONLY = ("--precision", "--liger", "--compile-layers", "--lora-targets", "--seq-len", "train.py")


def plan_json(*flags: str) -> dict:
    """`plan ... --json` in this process (the CLI's own entry point; tests/test_cli*.py run it as a subprocess)."""
    from generator.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["plan", "--model", "mistral-7b", *flags, "--json"])
    if code == 2 and "does not fit" in err.getvalue():
        pytest.skip(err.getvalue().split(":")[1])  # e.g. a full fine-tune on 24 GB cards: refused for every script
    assert code == 0, err.getvalue()
    return json.loads(out.getvalue())


def flag_values(words: list[str]) -> dict[str, str]:
    """--flag value pairs; a bare flag (--packing) maps to "" and a list flag to its words joined by spaces."""
    out: dict[str, str] = {}
    for i, w in enumerate(words):
        if w.startswith("--"):
            j = i + 1
            while j < len(words) and not words[j].startswith("--"):
                j += 1
            out[w] = " ".join(words[i + 1 : j])
    return out


def words_after_config(launch: str) -> list[str]:
    words = shlex.split(launch)
    return words[words.index("--config_file") + 2 :]


@pytest.mark.parametrize("machine", MACHINES)
@pytest.mark.parametrize("method", ["full", "lora", "qlora"])
def test_trainer_line_is_trl_cli_with_trl_levers_only(machine, method):
    plan = plan_json("--machine", machine, "--script", "trainer", "--method", method)
    words = words_after_config(plan["launch_command"])
    words = [w for w in words if w != "--enable_cpu_affinity"]
    assert words[:2] == ["-m", "trl.scripts.sft"]
    assert not [w for w in words if w in TRAIN_PY_ONLY or w.startswith("--micro")], words
    flags = flag_values(words[2:])
    assert flags["--per_device_train_batch_size"] == str(plan["micro_batch"])
    assert flags["--gradient_accumulation_steps"] == str(plan["gradient_accumulation_steps"])
    assert flags["--max_length"] == str(plan["seq_len"])
    assert "--packing" in words and ("--use_peft" in words) == (method != "full")
    assert ("--load_in_4bit" in words) == (method == "qlora")
    chosen = plan["chosen"]
    assert chosen["strategy"] == plan["strategy"]
    # the workload the plan priced is the one the line runs: TRL's kernel, no float8
    assert all("fp8" not in r for r in plan["reasons"] if r.startswith("precision"))
    assert any(r.startswith("script trainer:") for r in plan["reasons"])


@pytest.mark.parametrize("machine", MACHINES)
def test_custom_line_runs_the_users_loop_with_its_settings(machine, tmp_path):
    plan = plan_json("--machine", machine, "--script", "custom", "--method", "lora", "--script-path", "my_loop.py")
    words = [w for w in words_after_config(plan["launch_command"]) if w != "--enable_cpu_affinity"]
    assert words == ["my_loop.py"]
    settings = plan["loop_settings"]
    assert f"batch_size={plan['micro_batch']} per process" in settings[0]
    assert any(f"gradient_accumulation_steps={plan['gradient_accumulation_steps']}" in s for s in settings)
    assert any("attn_implementation='sdpa'" in s for s in settings)  # a plain loop's default: no flex unless declared
    assert any("target_modules=['q_proj', 'v_proj']" in s for s in settings)  # peft's default targets


def test_fp8_is_refused_for_scripts_without_a_float8_path():
    cmd = [sys.executable, "-m", "generator", "plan", "--model", "mistral-7b", "--script", "trainer", "--precision"]
    res = subprocess.run([*cmd, "fp8"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().count("\n") == 0 and "only train.py has a float8 path" in res.stderr


@pytest.mark.slow
def test_printed_trl_line_trains_on_cpu(tmp_path):
    """TRL's own script, launched as printed (model, data, steps and output filled in; CPU instead of bf16 GPUs)."""
    pytest.importorskip("trl")
    from bench.trl_cli import HOOK, filled_command
    from tests.tiny_model import build_tiny_mistral

    build_tiny_mistral(tmp_path / "tiny")
    cfg = tmp_path / "trl.yaml"
    plan = plan_json("--machine", "h200-sxm-2", "--num-gpus", "1", "--script", "trainer", "--method", "lora",
                     "--seq-len", "64", "--micro-batch", "2", "--global-batch", "4", "--output", str(cfg),
                     "--force")  # fmt: skip
    cmd = filled_command(plan["launch_command"], tmp_path / "tiny", ROOT / "recipes/data/trl-chat", 3, tmp_path / "o")
    cmd[cmd.index("--bf16") + 1] = "False"
    cmd += ["--use_cpu", "True"]
    log = tmp_path / "steps.jsonl"
    env = {**os.environ, "PYTHONPATH": str(HOOK), "BENCH_STEPLOG": str(log), "HF_DATASETS_CACHE": str(tmp_path)}
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    records = [json.loads(line) for line in log.read_text().splitlines()]
    start, steps = records[0], [r for r in records if "step" in r and "event" not in r]
    assert start["grad_accum"] == 2 and start["micro_batch"] == 2 and start["padding_free"] is True
    # the plan loads LoRA's frozen base in bf16 (TRL's default is float32) and says so; the base arrived in it and
    # peft kept the adapters it trains in fp32, as the plan's reason line states
    assert flag_values(shlex.split(plan["launch_command"]))["--dtype"] == "bfloat16"
    assert any(r.startswith("load dtype bf16 (--dtype bfloat16)") for r in plan["reasons"])
    assert start["trainable_param_dtypes"] == ["float32"] and start["frozen_param_dtypes"] == ["bfloat16"]
    assert [r["step"] for r in steps] == [1, 2, 3]
    # TRL's own token count: packed bins of at most 64 tokens, 2 x 2 per step
    assert all(r["num_tokens"] > 0 for r in steps) and steps[-1]["num_tokens"] <= 3 * 4 * 64
    assert all(r["loss"] > 0 and r["tokens_per_s_per_gpu"] > 0 for r in steps)


def test_trial_refuses_a_script_it_would_not_launch(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "generator", "plan", "--model", "mistral-7b", "--machine", "h200-sxm-2", "--script",
         "trainer", "--trial", "--output", str(tmp_path / "t.yaml")],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode == 2 and "Traceback" not in res.stderr and "--trial launches train.py" in res.stderr
    assert not (tmp_path / "t.yaml").exists()


def test_a_plain_loop_that_declares_liger_is_priced_with_it():
    """custom has no Liger switch the planner pulls, but --liger (your loop applies it) is priced as Liger's full
    kernels (the fused loss frees the logits); TRL's Liger is credited its kernels' smaller saved tensors and keeps
    TRL's own loss, so it saves less (measured with TRL's CLI: 79.3 GB against 91.2 without, LoRA all-linear, bf16,
    seq 4096, micro-batch 2, no checkpointing; bench/results/h200-x1-trl-cli-2026-12-01.json)."""
    from generator.estimate import Placement, Workload, estimate
    from generator.model import load_model

    m, p = load_model("mistral-7b"), Placement(1, "NVIDIA H200", 150.75, 0.0)
    peak = {}
    for script in ("custom", "trainer"):
        for liger in (False, True):
            w = Workload(method="lora", seq_len=4096, grad_checkpointing=False, load_dtype="bf16", script=script,
                         liger=liger)  # fmt: skip
            peak[script, liger] = estimate(m, w, p, "ddp").peak_gb
    assert peak["custom", True] < peak["custom", False]
    assert peak["trainer", True] < peak["trainer", False]
    kernels_only = peak["trainer", False] - peak["trainer", True]
    assert 0 < kernels_only < peak["custom", False] - peak["custom", True]


def test_trl_without_checkpointing_reserves_little_beyond_its_peak():
    """TRL's chunked LM head never builds the logits, and its runs without checkpointing reserved 1.02x their peak
    (TRL CLI fit rows) where train.py's logits-sized blocks leave 1.11x: reserved over peak follows the script."""
    from generator.estimate import Placement, Workload, estimate
    from generator.model import load_model

    m, p = load_model("mistral-7b"), Placement(1, "NVIDIA H200", 150.75, 0.0)
    ratio = {}
    for script in ("train.py", "trainer"):
        for ckpt in (False, True):
            w = Workload(method="lora", seq_len=4096, micro_batch=2, grad_checkpointing=ckpt, load_dtype="bf16",
                         script=script)  # fmt: skip
            e = estimate(m, w, p, "ddp")
            ratio[script, ckpt] = e.reserved_gb / e.peak_gb
    assert ratio["trainer", False] < 1.05 < ratio["train.py", False]
    assert ratio["trainer", True] >= 1.0


def _versus_train_py(plan: dict) -> tuple[float, str]:
    """(train.py's predicted tokens/s per GPU, the words around it) from the plan's `script ...:` reason."""
    (line,) = [r for r in plan["reasons"] if r.startswith("script ")]
    m = re.search(r"train\.py (?:would be predicted [+-]\d+% faster: |is predicted \w+(?: \d+%)?(?: here)? \()([\d,]+)",
                  line)  # fmt: skip
    assert m, line
    return float(m.group(1).replace(",", "")), line


@pytest.mark.parametrize("flags", [("--model", "mistral-7b", "--method", "lora", "--num-gpus", "1"),
                                   ("--model", "qwen2.5-7b", "--method", "qlora", "--seq-len", "8192")])  # fmt: skip
def test_the_train_py_comparison_says_what_the_numbers_say(flags):
    """The reason line's verdict (faster by N%, within the tie, the same, slower) follows the two predictions: TRL's
    plan against train.py's plan of the same request."""
    cmd = [sys.executable, "-m", "generator", "plan", "--machine", "h200-sxm-2", *flags, "--json"]
    plan = json.loads(subprocess.run([*cmd, "--script", "trainer"], cwd=ROOT, capture_output=True, text=True,
                                     timeout=60, check=True).stdout)  # fmt: skip
    theirs, line = _versus_train_py(plan)
    assert "GPU(s)" not in line or f"on {plan['num_processes']} GPU(s)" in line  # the same GPUs: per GPU compares
    gain = theirs / plan["chosen"]["tokens_per_s_per_gpu"] - 1
    if gain > 0.02:
        said = re.search(r"would be predicted \+(\d+)% faster", line)
        assert said and abs(int(said.group(1)) - 100 * gain) <= 1, line
    elif gain < -0.02:
        assert "slower here" in line
    else:
        assert "within 2% here" in line or "the same here" in line


@pytest.mark.parametrize("method", ["full", "lora", "qlora"])
def test_trl_loads_a_frozen_base_in_bf16_and_says_what_float32_would_do(method):
    """--script trainer has TRL's --dtype: the planner loads LoRA's and QLoRA's frozen base in bf16 as train.py does
    (less memory, no per-forward casts of fp32 weights) with one line against TRL's own float32 default, keeps the
    full fine-tune's fp32 masters, and takes --load-dtype fp32 as the opt-out (no line then)."""
    base = ("--machine", "h200-sxm-2", "--num-gpus", "1", "--script", "trainer", "--method", method)
    plan = plan_json(*base)
    dtype = flag_values(words_after_config(plan["launch_command"]))["--dtype"]
    said = [r for r in plan["reasons"] if r.startswith("load dtype")]
    if method == "full":
        assert dtype == "float32" and not said
        return
    assert dtype == "bfloat16" and len(said) == 1 and "float32" in said[0]
    kept = plan_json(*base, "--load-dtype", "fp32")
    assert flag_values(words_after_config(kept["launch_command"]))["--dtype"] == "float32"
    assert not [r for r in kept["reasons"] if r.startswith("load dtype")]
    # the line compares the same levers in float32: more memory, no faster; where the opt-out plan settles on those
    # same levers, its numbers are the line's
    less = re.search(r"predicted ([+-]\d+)% tokens/s and (-?[\d.]+) GB less reserved", said[0])
    over = re.search(r"in float32 would need ([\d.]+) GB per GPU, over the card", said[0])
    assert (less and int(less.group(1)) >= 0 and float(less.group(2)) > 0) or (
        over and float(over.group(1)) > plan["chosen"]["reserved_gb"]
    ), said[0]
    if kept["micro_batch"] == plan["micro_batch"] and kept["grad_checkpointing"] == plan["grad_checkpointing"]:
        assert f"{kept['chosen']['reserved_gb']:.1f} GB)" in said[0]
