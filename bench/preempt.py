"""Preemption under a real launcher (issue 21, run 6): train.py uninterrupted, then the same run sent SIGTERM mid-way
and resumed with --resume; the per-step losses of the two must agree.

    python bench/preempt.py --strategy fsdp  --workdir /tmp/preempt --output $OUT/preempt-fsdp.json   # 2 GPUs
    python bench/preempt.py --strategy zero3 --workdir /tmp/preempt --output $OUT/preempt-zero3.json
    python bench/preempt.py --cpu --workdir /tmp/preempt-cpu                  # DDP over gloo on the tiny model

GPU mode plans the strategy with `generator plan` for the live machine on Mistral-7B's architecture (random init, seq
1024 micro-batch 1, 12 steps, checkpoint every 4); CPU mode writes a 2-process DDP config (gloo) and a tiny Mistral
(tests/tiny_model.py). Losses agree when |a - b| <= 0.05 + 2% (the parity test's tolerance: a resumed GPU run
recomputes in bf16 in another order; a lost or repeated step moves the loss by more). Exit 1 when they do not.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.harness import SAFE_ENV, model_dir  # noqa: E402

CPU_CONFIG = """compute_environment: LOCAL_MACHINE
distributed_type: MULTI_GPU
num_processes: 2
num_machines: 1
machine_rank: 0
gpu_ids: all
main_process_port: 0
mixed_precision: 'no'
use_cpu: false
"""


def setup(args) -> tuple[Path, Path, list[str]]:
    """(accelerate config, model dir, train.py flags for the workload)."""
    args.workdir.mkdir(parents=True, exist_ok=True)
    cfg = args.workdir / f"{args.strategy}.yaml"
    if args.cpu:
        from tests.tiny_model import build_tiny_mistral

        model = args.workdir / "tiny"
        if not (model / "config.json").exists():
            build_tiny_mistral(model)
        cfg.write_text(CPU_CONFIG)
        return cfg, model, ["--seq-len", "64", "--micro-batch", "2", "--global-batch", "8", "--lr", "3e-3"]
    plan = [sys.executable, "-m", "generator", "plan", "--model", "mistral-7b", "--num-gpus", "2", "--strategy",
            args.strategy, "--seq-len", "1024", "--micro-batch", "1", "--global-batch", "2", "--output", str(cfg),
            "--force"]  # fmt: skip
    subprocess.run(plan, cwd=REPO, check=True, capture_output=True, timeout=120)
    return cfg, model_dir(args.workdir), ["--seq-len", "1024", "--micro-batch", "1", "--global-batch", "2"]


def command(cfg: Path, model: Path, flags: list[str], out: Path, steps: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(cfg), "train.py",
            "--model", str(model), "--init", "random", *flags, "--warmup-steps", "2", "--max-steps", str(steps),
            "--save-every", str(steps // 3), "--output-dir", str(out), "--no-export", *extra]  # fmt: skip


def losses(out: Path) -> dict[int, float]:
    """Step -> loss; a step repeated after the resume keeps its last record."""
    recs = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: r["loss"] for r in recs if "loss" in r}


def interrupted(cmd: list[str], out: Path, at: int, env: dict, timeout: float) -> int:
    """Run until step `at` is logged, SIGTERM train.py's workers, wait; the code the launcher returned."""
    import psutil

    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout
    while proc.poll() is None and time.time() < deadline:
        try:
            if max(losses(out), default=0) >= at:
                break
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            pass
        time.sleep(0.1)
    for p in psutil.Process(proc.pid).children(recursive=True):
        if "train.py" in " ".join(p.cmdline()):
            p.send_signal(signal.SIGTERM)
    return proc.wait(timeout=timeout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strategy", default="ddp", help="fsdp | zero3 on GPUs (CPU mode: DDP over gloo)")
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--output", type=Path, help="write the comparison here (JSON)")
    ap.add_argument("--timeout", type=float, default=420)
    args = ap.parse_args(argv)
    env = {**os.environ, **SAFE_ENV, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    if args.cpu:
        env["TRAIN_TEST_STEP_DELAY"] = "0.2"  # train.py's test hook: time for the signal to land mid-run
    cfg, model, flags = setup(args)
    base, cut = args.workdir / f"{args.strategy}-base", args.workdir / f"{args.strategy}-cut"
    for d in (base, cut):
        subprocess.run(["rm", "-rf", str(d)], check=True)
    subprocess.run(command(cfg, model, flags, base, args.steps), cwd=REPO, env=env, check=True, timeout=args.timeout)
    code = interrupted(command(cfg, model, flags, cut, args.steps), cut, args.steps // 2, env, args.timeout)
    resumed = subprocess.run(command(cfg, model, flags, cut, args.steps, "--resume"), cwd=REPO, env=env,
                             timeout=args.timeout)  # fmt: skip
    a, b = losses(base), losses(cut)
    bad = [s for s in a if s not in b or abs(a[s] - b[s]) > 0.05 + 0.02 * abs(a[s])]
    result = dict(strategy=args.strategy, cpu=args.cpu, steps=args.steps, interrupted_exit=code,
                  resumed_exit=resumed.returncode, base_losses=a, resumed_losses=b, disagree_steps=bad)  # fmt: skip
    if args.output:
        args.output.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if "losses" not in k}))
    return 0 if resumed.returncode == 0 and code != 0 and not bad else 1


if __name__ == "__main__":
    raise SystemExit(main())
