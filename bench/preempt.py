"""Preemption and kill-during-save under a real launcher (issue 21 run 6, issue 27): train.py uninterrupted, then the
same run stopped mid-way and resumed with --resume; the per-step losses of the two must agree.

    python bench/preempt.py --workdir /tmp/preempt --output $OUT/preempt-h200-x1.json --log-dir $OUT/preempt-logs
    python bench/preempt.py --strategy fsdp  --workdir /tmp/preempt --output $OUT/preempt-fsdp.json   # 2 GPUs
    python bench/preempt.py --strategy zero3 --workdir /tmp/preempt --output $OUT/preempt-zero3.json
    python bench/preempt.py --cpu --workdir /tmp/preempt-cpu                  # DDP over gloo on the tiny model

One GPU (default): the rows of ONE_GPU_ROWS, each planned with `generator plan --num-gpus 1 --strategy S --method M`
on the live GPU: SIGTERM rows (the stop signal, a checkpoint, exit 75, --resume) for DDP and FSDP2 (one process) with
LoRA, QLoRA (DDP) and a full fine-tune, and a kill-during-save row (SIGKILL while the step-8 checkpoint is being
written, held open by train.py's TRAIN_TEST_SLOW_SAVE hook; --resume must load step 4 and continue). Every row runs
Mistral-7B's widths cut down to --layers decoder layers (default 8: the full fine-tune's checkpoint, fp32 weights and
AdamW states, is 24 GB; 32 layers would not fit twice on the device's disk), random init, seq 512, micro-batch 1,
global batch 2, 12 steps. Rows run side by side on the one GPU (the base and the interrupted run of a row too), except
the full fine-tunes, which take turns (disk space); a row's checkpoints are deleted once it is compared.
Two GPUs (--strategy fsdp|zero3): Mistral-7B itself, seq 1024, checkpoint every 4. CPU: a 2-process DDP config (gloo)
and a tiny Mistral (tests/tiny_model.py), a SIGTERM row and a kill-during-save row.

Losses agree when |a - b| <= 0.05 + 2% (the parity test's tolerance: a resumed GPU run recomputes in bf16 in another
order; a lost or repeated step moves the loss by more). Exit 1 when a row fails.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.harness import SAFE_ENV, model_dir, save, versions  # noqa: E402

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
TOLERANCE = (0.05, 0.02)  # absolute, relative
STEP_DELAY_S = 0.5  # train.py's test hook in the interrupted run: time for the signal to land mid-run


@dataclass(frozen=True)
class Row:
    name: str
    strategy: str
    method: str = "full"
    kill_during_save: bool = False
    """SIGKILL while the second periodic checkpoint (step 2 * save_every) is being written, not SIGTERM mid-run."""
    lane: str = ""
    """Rows of one lane run one after another (the full fine-tunes: their checkpoints share the disk); "" = own."""


ONE_GPU_ROWS = (
    Row("ddp-full", "ddp", "full", lane="full"),
    Row("fsdp-full", "fsdp", "full", lane="full"),
    Row("ddp-lora", "ddp", "lora"),
    Row("ddp-qlora", "ddp", "qlora"),
    Row("fsdp-lora", "fsdp", "lora"),
    Row("ddp-lora-kill-during-save", "ddp", "lora", kill_during_save=True),
)
CPU_ROWS = (Row("cpu-ddp", "ddp"), Row("cpu-ddp-kill-during-save", "ddp", kill_during_save=True))


def two_gpu_rows(strategy: str) -> tuple[Row, ...]:
    return (Row(strategy, strategy),)


def save_every(steps: int) -> int:
    """The kill row's checkpoint interval: 12 steps save at 4, 8, 12, and the save of step 8 is the one killed."""
    return max(1, steps // 3)


def workload(mode: str) -> list[str]:
    """train.py's flags for the workload of a mode (cpu, gpu1, gpu2)."""
    if mode == "cpu":
        return ["--seq-len", "64", "--micro-batch", "2", "--global-batch", "8", "--lr", "3e-3"]
    seq = "512" if mode == "gpu1" else "1024"
    return ["--seq-len", seq, "--micro-batch", "1", "--global-batch", "2"]


def plan_command(row: Row, mode: str, cfg: Path) -> list[str]:
    """`generator plan` for the live machine; bf16 and eager, so neither fp8 nor compiled layers (and their compile)
    come into it."""
    gpus = "1" if mode == "gpu1" else "2"
    return [sys.executable, "-m", "generator", "plan", "--model", "mistral-7b", "--num-gpus", gpus, "--strategy",
            row.strategy, "--method", row.method, "--precision", "bf16", "--no-compile-layers", *workload(mode),
            "--output", str(cfg),
            "--force"]  # fmt: skip


def train_command(row: Row, cfg: Path, model: Path, flags: list[str], out: Path, steps: int, run: str) -> list[str]:
    """run: base (uninterrupted), cut (to be stopped) or resume. Only the kill row saves periodically; a SIGTERM
    writes its own checkpoint, so the other rows write one checkpoint each (saving changes no number the loss
    depends on, so the base run saves nothing)."""
    every = save_every(steps) if row.kill_during_save and run != "base" else 0
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(cfg), "train.py",
            "--model", str(model), "--init", "random", "--method", row.method, *flags, "--warmup-steps", "2",
            "--max-steps", str(steps), "--save-every", str(every), "--output-dir", str(out), "--no-export",
            *(["--resume"] if run == "resume" else [])]  # fmt: skip


def run_env(row: Row, run: str, steps: int) -> dict:
    env = {**os.environ, **SAFE_ENV, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "2"}
    if run == "cut":
        env["TRAIN_TEST_STEP_DELAY"] = str(STEP_DELAY_S)
        if row.kill_during_save:
            env["TRAIN_TEST_SLOW_SAVE"] = f"{2 * save_every(steps)}:600"  # held open until the SIGKILL
    return env


def losses(out: Path) -> dict[int, float]:
    """Step -> loss; a step repeated after the resume keeps its last record."""
    return {r["step"]: r["loss"] for r in records(out) if "loss" in r}


def records(out: Path) -> list[dict]:
    path = out / "train_log.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def disagreements(base: dict[int, float], resumed: dict[int, float]) -> list[int]:
    """Steps of the uninterrupted run the resumed one lost, or whose loss it moved by more than TOLERANCE."""
    absolute, relative = TOLERANCE
    return [s for s in base if s not in resumed or abs(base[s] - resumed[s]) > absolute + relative * abs(base[s])]


def stop_when(proc: subprocess.Popen, ready, sig: int, timeout: float) -> int:
    """Wait until ready() holds, send `sig` to train.py's workers (not the launcher), wait; the launcher's code."""
    import psutil

    deadline = time.time() + timeout
    while proc.poll() is None:
        try:
            if ready():
                break
        except (json.JSONDecodeError, KeyError, OSError):  # the log is being appended to
            pass
        if time.time() > deadline:
            raise TimeoutError(f"the run to be stopped did not get there within {timeout:.0f} s")
        time.sleep(0.1)
    if proc.poll() is None:
        for p in psutil.Process(proc.pid).children(recursive=True):
            if "train.py" in " ".join(p.cmdline()):
                p.send_signal(sig)
    return proc.wait(timeout=max(1.0, deadline - time.time()))


def cut_ready(row: Row, out: Path, steps: int):
    """When to stop the interrupted run: half-way (SIGTERM), or once the second periodic save is under way."""
    if row.kill_during_save:
        step = 2 * save_every(steps)
        return lambda: (
            (out / f".tmp-step-{step:08d}").is_dir()
            and any(r.get("event") == "save_begin" and r["step"] == step for r in records(out))
        )
    return lambda: max(losses(out), default=0) >= steps // 2


def verdict(
    row: Row, base: dict, cut_out: Path, cut_exit: int, latest_after_cut: str | None, resume_exit: int, steps: int
) -> dict:
    """The row's result: pass when the interrupted run failed as it should, the resume finished and every step's
    loss agrees; the kill row also needs the resume to have started from the last complete checkpoint."""
    resumed = losses(cut_out)
    starts = [r for r in records(cut_out) if r.get("event") == "start"]
    resumed_from = starts[-1].get("resumed_from") if starts else None
    preempted = [r for r in records(cut_out) if r.get("event") == "preempted"]
    bad = disagreements(base, resumed)
    ok = cut_exit != 0 and resume_exit == 0 and not bad and len(base) == steps and resumed_from is not None
    if row.kill_during_save:  # the killed save never became `latest`; the resume took the one before it
        expected = f"step-{save_every(steps):08d}"
        ok = ok and latest_after_cut == expected and Path(resumed_from or "").name == expected
    else:  # SIGTERM: train.py checkpointed and said 75 (the launcher itself reports 1)
        expected = Path(resumed_from or "").name or None
        ok = ok and bool(preempted) and preempted[0]["exit_code"] == 75
    return dict(strategy=row.strategy, method=row.method, kill_during_save=row.kill_during_save,
                interrupted_exit=cut_exit, preempted=preempted[0] if preempted else None,
                latest_after_cut=latest_after_cut, resumed_exit=resume_exit, resumed_from=resumed_from,
                expected_resume=expected, base_losses=base, resumed_losses=resumed, disagree_steps=bad,
                passed=bool(ok))  # fmt: skip


def launch(cmd: list[str], env: dict, log: Path, started: list) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT)
    started.append(proc)
    return proc


def kill_tree(proc: subprocess.Popen) -> None:
    """A launch still running when its row gave up (a timeout): the launcher and its workers, by pid."""
    import psutil

    if proc.poll() is not None:
        return
    for p in [*psutil.Process(proc.pid).children(recursive=True), psutil.Process(proc.pid)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    proc.wait(timeout=30)


def run_row(row: Row, mode: str, model: Path, args) -> dict:
    work, logs = args.workdir / row.name, args.workdir / "logs"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cfg, flags = work / "accelerate.yaml", workload(mode)
    t0 = time.time()
    if mode == "cpu":
        cfg.write_text(CPU_CONFIG)
    else:
        planned = subprocess.run(plan_command(row, mode, cfg), cwd=REPO, capture_output=True, text=True, timeout=120)
        if planned.returncode != 0:
            raise RuntimeError(f"generator plan failed: {(planned.stderr.strip().splitlines() or ['?'])[-1]}")
    base_out, cut_out = work / "base", work / "cut"
    cmd = lambda out, run: train_command(row, cfg, model, flags, out, args.steps, run)  # noqa: E731
    # Launches side by side get a datasets cache each (one shared Arrow cache written by several at once is a race).
    env = lambda run: {**run_env(row, run, args.steps), "HF_DATASETS_CACHE": str(work / f"datasets-{run}")}  # noqa: E731
    started: list[subprocess.Popen] = []
    try:
        base = launch(cmd(base_out, "base"), env("base"), logs / f"{row.name}-base.log", started)
        cut = launch(cmd(cut_out, "cut"), env("cut"), logs / f"{row.name}-cut.log", started)
        sig = signal.SIGKILL if row.kill_during_save else signal.SIGTERM
        cut_exit = stop_when(cut, cut_ready(row, cut_out, args.steps), sig, left(args))
        latest_after_cut = (cut_out / "latest").read_text().strip() if (cut_out / "latest").exists() else None
        resume = launch(cmd(cut_out, "resume"), env("resume"), logs / f"{row.name}-resume.log", started)
        resume_exit, base_exit = resume.wait(timeout=left(args)), base.wait(timeout=left(args))
        result = verdict(row, losses(base_out), cut_out, cut_exit, latest_after_cut, resume_exit, args.steps)
        result.update(base_exit=base_exit, seconds=round(time.time() - t0, 1))
        result["passed"] = result["passed"] and base_exit == 0
    finally:
        for proc in started:
            kill_tree(proc)
        for out, run in ((base_out, "base"), (cut_out, "cut")):  # keep the per-step logs, free the disk
            if (out / "train_log.jsonl").exists():
                shutil.copy(out / "train_log.jsonl", logs / f"{row.name}-{run}.jsonl")  # cut: + the resume
            shutil.rmtree(out, ignore_errors=True)
    print(json.dumps({"row": row.name, **{k: v for k, v in result.items() if "losses" not in k}}), flush=True)
    return result


def left(args) -> float:
    """Seconds the next wait may take: one launch's --timeout, cut to what is left of --budget-s."""
    if args.deadline is None:
        return args.timeout
    return max(1.0, min(args.timeout, args.deadline - time.time()))


def lanes(rows: tuple[Row, ...]) -> list[list[Row]]:
    """Rows grouped so that rows sharing a lane run in order and everything else side by side."""
    grouped: dict[str, list[Row]] = {}
    for i, row in enumerate(rows):
        grouped.setdefault(row.lane or f"_{i}", []).append(row)
    return list(grouped.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strategy", help="fsdp | zero3: the two-GPU run on Mistral-7B (default: the one-GPU rows)")
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--only", help="comma-separated row names (default: every row of the mode)")
    ap.add_argument("--layers", type=int, default=8, help="one GPU: decoder layers of the cut-down Mistral-7B")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--output", type=Path, help="write every row's result here (JSON)")
    ap.add_argument("--log-dir", type=Path, help="copy each launch's output and per-step log here")
    ap.add_argument("--timeout", type=float, default=420, help="seconds one launch may take")
    ap.add_argument(
        "--budget-s",
        type=float,
        help="stop every row still running this many seconds after the start "
        "(rows left are recorded as failed with the reason; the JSON keeps the rows done)",
    )
    args = ap.parse_args(argv)
    mode = "cpu" if args.cpu else "gpu2" if args.strategy else "gpu1"
    rows = CPU_ROWS if mode == "cpu" else two_gpu_rows(args.strategy) if args.strategy else ONE_GPU_ROWS
    if args.only:
        names = args.only.split(",")
        unknown = sorted(set(names) - {r.name for r in rows})
        if unknown:
            ap.error(f"--only {','.join(unknown)}: not a row here ({', '.join(r.name for r in rows)})")
        rows = tuple(r for r in rows if r.name in names)
    args.workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    args.deadline = t0 + args.budget_s if args.budget_s else None
    if mode == "cpu":
        from tests.tiny_model import build_tiny_mistral

        model = args.workdir / "tiny"
        if not (model / "config.json").exists():
            build_tiny_mistral(model)
    elif mode == "gpu1":
        model = args.workdir / f"mistral-7b-{args.layers}l"
        if not (model / "config.json").exists():
            subprocess.run([sys.executable, "tests/tiny_model.py", "mistral-7b", str(model), "--layers",
                            str(args.layers)], cwd=REPO, check=True, timeout=300)  # fmt: skip
    else:
        model = model_dir(args.workdir)

    result = dict(mode=mode, steps=args.steps, layers=args.layers if mode == "gpu1" else None,
                  workload=workload(mode), tolerance={"abs": TOLERANCE[0], "rel": TOLERANCE[1]},
                  date=time.strftime("%F"), rows={}, pending=sorted(r.name for r in rows))  # fmt: skip
    lock = threading.Lock()

    def record(name: str, row_result: dict) -> None:
        """Each row as it finishes, so a call cut short by the device's time limit still returns the rows it did."""
        with lock:
            result["rows"][name] = row_result
            result["pending"].remove(name)
            result.update(seconds=round(time.time() - t0, 1), passed=all(r["passed"] for r in result["rows"].values()))
            result["passed"] = result["passed"] and not result["pending"]
            if args.output:
                save(result, args.output)
            if args.log_dir and args.log_dir != args.workdir / "logs":
                shutil.copytree(args.workdir / "logs", args.log_dir, dirs_exist_ok=True)

    def run_lane(lane: list[Row]) -> None:
        for row in lane:
            try:
                record(row.name, run_row(row, mode, model, args))
            except Exception as exc:  # a row that could not run is a failed row, not a lost session
                record(row.name, dict(strategy=row.strategy, method=row.method, passed=False,
                                      error=f"{type(exc).__name__}: {str(exc).strip()[:500]}"))  # fmt: skip

    with ThreadPoolExecutor(max_workers=len(rows) + 1) as pool:
        found = pool.submit(versions) if mode != "cpu" else None
        list(pool.map(run_lane, lanes(rows)))
        if found is not None:
            with lock:
                result["versions"] = found.result()
    record_all = {k: v for k, v in result.items() if k != "pending"}
    if args.output:
        save(record_all, args.output)
    print(json.dumps({k: v for k, v in record_all.items() if k != "rows"}))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
