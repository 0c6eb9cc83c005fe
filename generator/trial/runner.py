"""Run one candidate for real: `accelerate launch --config_file <trial cfg> train.py ...` in its own process group,
stopped after N steps or a time budget, and always cleaned up (the whole group is killed on the way out, so a Ctrl-C
or an exception in the parent never leaves training ranks holding GPU memory)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from generator.emit import render, write
from generator.emit.command import launch_flags, nccl_env
from generator.emit.command import train_args as plan_train_args
from generator.errors import UserError
from generator.plan.types import Plan
from generator.trial.metrics import Measured, looks_oom, read_steps, summarize

LAUNCHER_ENV = "DCG_TRIAL_LAUNCHER"
"""Overrides the launcher words (default `python -m accelerate.commands.launch`); tests point it at fakes."""
CPU_STRATEGIES = ("ddp",)
"""What a CPU trial can run: FSDP2 and DeepSpeed need CUDA/NCCL."""
BUDGET_MAX_STEPS = 50
"""With --trial-budget-s, steps run until the budget ends, at most this many (the synthetic data is sized for it)."""
DEFAULT_TRAIN_SCRIPT = "train.py"
"""What the trial launches unless --train-script says otherwise: train.py in the working directory (the checkout)."""


@dataclass(frozen=True)
class TrialOptions:
    steps: int = 8
    budget_s: float | None = None
    """Wall-clock seconds per candidate; the run is stopped then and the steps logged so far count."""
    model_dir: str | None = None
    """What train.py loads (weights: --init pretrained); None: the plan's model with --init random."""
    dataset: str | None = None
    """None: synthetic text written for the requested sequence length."""
    device: str = "cuda"
    """cuda, or cpu (DDP only, use_cpu: true, no mixed precision) for machines without GPUs and for CI."""
    train_script: str = DEFAULT_TRAIN_SCRIPT
    """The training script `accelerate launch` runs; passed, never guessed from where this package is installed."""


@dataclass(frozen=True)
class TrialResult:
    plan: Plan
    status: str
    """ok | oom ("does not fit (measured)") | failed | skipped."""
    detail: str
    measured: Measured | None
    log_file: str


def train_script(path: str = DEFAULT_TRAIN_SCRIPT) -> Path:
    """The training script as an absolute path, or a UserError saying how to point at it."""
    script = Path(path).expanduser()
    if not script.is_file():
        where = f"in {Path.cwd()}" if path == DEFAULT_TRAIN_SCRIPT else "there"
        raise UserError(
            f"a trial runs the training script, and there is no {path} {where}; run from the checkout that holds "
            "train.py or pass --train-script PATH/TO/train.py"
        )
    return script.resolve()


def run_trial(plan: Plan, opts: TrialOptions, workdir: Path, name: str) -> TrialResult:
    log_file = workdir / f"{name}.jsonl"
    if opts.device == "cpu" and plan.strategy not in CPU_STRATEGIES:
        return TrialResult(plan, "skipped", f"{plan.strategy} cannot run on CPU", None, str(log_file))
    cfg = write_config(plan, opts, workdir / f"{name}.yaml")
    args = trial_args(plan, opts, workdir, name, log_file)
    flags = launch_flags(plan) if opts.device == "cuda" else []
    argv = launcher() + ["--config_file", str(cfg), *flags, str(train_script(opts.train_script)), *args]
    env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID", PYTHONUNBUFFERED="1", **nccl_env(plan))
    output = workdir / f"{name}.out"
    rc, timed_out = run_group(argv, env, output, opts.budget_s)
    text = output.read_text(errors="replace")
    measured = summarize(read_steps(log_file))
    if looks_oom(text):
        return TrialResult(plan, "oom", "does not fit (measured): out of memory", measured, str(log_file))
    if measured is None:
        why = "no step finished within the budget" if timed_out else f"exit {rc}: {child_error(text)}"
        return TrialResult(plan, "failed", why, None, str(log_file))
    if rc != 0 and not timed_out:
        why = f"exit {rc} after {measured.steps} step(s): {child_error(text)}"
        return TrialResult(plan, "failed", why, measured, str(log_file))
    return TrialResult(plan, "ok", f"{measured.steps} steps", measured, str(log_file))


ERROR_LINE = re.compile(r"^\S*train\.py: error: ")
"""How train.py (and argparse in it) says what is wrong, in one line: what a failed trial reports."""
EXCEPTION_LINE = re.compile(r"^[\w.]*(Error|Exception|Interrupt)\b.*:")
WRAPPER_ERRORS = ("CalledProcessError", "ChildFailedError")
"""The launcher's own exceptions, which only repeat that a rank failed (a truncated command line)."""
MAX_DETAIL = 300


def child_error(output: str) -> str:
    """The child's own last error line: train.py's `train.py: error: ...`, else the last exception that is not the
    launcher's wrapper around it, else the last line; never a truncated repr of the launcher's command."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    # torchrun prefixes each rank's lines ("[rank0]: "); the message starts after it
    lines = [re.sub(r"^\[(rank|default)\d*\]:\s*", "", ln) for ln in lines]
    own = [ln for ln in lines if ERROR_LINE.match(ln)]
    raised = [ln for ln in lines if EXCEPTION_LINE.match(ln) and not any(w in ln for w in WRAPPER_ERRORS)]
    rest = [ln for ln in lines if not any(w in ln for w in WRAPPER_ERRORS)]
    line = (own or raised or rest or lines or ["no output"])[-1]
    return line if len(line) <= MAX_DETAIL else line[: MAX_DETAIL - 3] + "..."


def launcher() -> list[str]:
    custom = os.environ.get(LAUNCHER_ENV)
    return shlex.split(custom) if custom else [sys.executable, "-m", "accelerate.commands.launch"]


def run_group(argv: list[str], env: dict, output: Path, budget_s: float | None) -> tuple[int | None, bool]:
    """Run argv in a new session; return (exit code, stopped by the budget). The group is killed in `finally`."""
    with output.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            try:
                return proc.wait(timeout=budget_s), False
            except subprocess.TimeoutExpired:
                stop_group(proc, signal.SIGTERM, grace_s=15)
                return proc.returncode, True
        finally:
            stop_group(proc, signal.SIGKILL, grace_s=5)


def stop_group(proc: subprocess.Popen, sig: int, grace_s: float) -> None:
    """Signal the trial's whole process group (launcher and every rank) and wait for the launcher."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def write_config(plan: Plan, opts: TrialOptions, path: Path) -> Path:
    emitted = render(plan, str(path))
    write(emitted, force=True)
    if opts.device == "cpu":
        path.write_text(yaml.safe_dump(cpu_config(emitted.yaml_dict), sort_keys=False))
    return path


def cpu_config(cfg: dict) -> dict:
    """The plan's (DDP) config made to run on CPU: use_cpu, gloo for several processes, no mixed precision."""
    out = {k: v for k, v in cfg.items() if k != "gpu_ids"}
    out.update(use_cpu=True, mixed_precision="no", distributed_type="NO" if cfg["num_processes"] == 1 else "MULTI_CPU")
    return out


def trial_model(plan: Plan, opts: TrialOptions) -> str:
    """What train.py's --model is in a trial: --model-dir, else the plan's model as the launch command names it."""
    args = plan_train_args(plan)
    return opts.model_dir or args[args.index("--model") + 1]


def trial_args(plan: Plan, opts: TrialOptions, workdir: Path, name: str, log_file: Path) -> list[str]:
    args = plan_train_args(plan)
    max_steps = opts.steps if opts.budget_s is None else max(opts.steps, BUDGET_MAX_STEPS)
    args[args.index("--model") + 1] = trial_model(plan, opts)
    if not opts.model_dir or not has_weights(opts.model_dir):
        args += ["--init", "random"]
    dataset = opts.dataset or str(synthetic_dataset(workdir, plan.workload.seq_len, plan.global_batch, max_steps))
    args += ["--dataset", dataset, "--max-steps", str(max_steps), "--log-file", str(log_file), "--no-export"]
    return args + ["--save-every", "0", "--output-dir", str(workdir / f"{name}_out")]


def has_weights(model_dir: str) -> bool:
    """A local directory holding only config.json and a tokenizer (no hub access, no weights) trials with random
    weights: the speed and memory of a step do not depend on the values."""
    d = Path(model_dir)
    if not d.is_dir():
        return True  # a hub id: train.py fetches the weights
    return any(d.glob("*.safetensors")) or any(d.glob("*.bin")) or any(d.glob("*.safetensors.index.json"))


def synthetic_dataset(workdir: Path, seq_len: int, global_batch: int, steps: int) -> Path:
    """Random-word text, enough packed sequences of `seq_len` tokens for `steps` optimizer steps (plus slack: a
    tokenizer may merge several characters into one token). Written once per workdir and sequence length."""
    path = workdir / f"synthetic_{seq_len}.jsonl"
    if path.exists():
        return path
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 8))) for _ in range(512)]
    rows = 2 * max(steps, 8) * global_batch + 8
    with path.open("w") as f:
        for i in range(rows):
            text = " ".join(rng.choice(words) for _ in range(seq_len))  # >= seq_len tokens under any tokenizer
            f.write(json.dumps({"id": i, "text": text}) + "\n")
    return path
