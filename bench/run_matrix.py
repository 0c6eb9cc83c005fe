"""GPU benchmark matrix: every strategy the generator emits, measured with train.py, predictions beside measurements.

Run on a GPU machine, from the repo root:

    python bench/run_matrix.py --budget-s 540            # runs cells until the budget would be exceeded
    python bench/run_matrix.py --budget-s 540            # again: resumes after the last finished cell

Each cell = (GPUs, strategy, method, seq len, micro-batch, activation checkpointing). For each cell the generator
writes the config for *this* machine (live topology), train.py runs it for --steps steps on Mistral-7B architecture
with random weights, and the per-step log gives peak memory per rank, median step time after warm-up, tokens/s per
GPU and MFU. Results are merged into one JSON file after every cell, so a killed run loses at most one cell.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
WARMUP_STEPS = 5

# (strategy, method); LoRA runs under DDP (adapters are tiny, sharding buys nothing).
STRATEGIES = [
    ("ddp", "full"),
    ("fsdp", "full"),
    ("fsdp_grad_op", "full"),
    ("zero1", "full"),
    ("zero2", "full"),
    ("zero3", "full"),
    ("ddp", "lora"),
]
WORKLOADS = [(4096, 1), (1024, 4)]


def cell_key(gpus: int, strategy: str, method: str, seq: int, mb: int, ckpt: bool) -> str:
    return f"g{gpus}-{strategy}-{method}-s{seq}-mb{mb}-ckpt{'on' if ckpt else 'off'}"


def all_cells(gpu_counts: list[int]) -> list[dict]:
    cells = []
    for gpus in gpu_counts:
        for seq, mb in WORKLOADS:
            for ckpt in (True, False):
                for strategy, method in STRATEGIES:
                    if gpus == 1 and strategy not in ("ddp", "fsdp", "zero2"):
                        continue  # one GPU: zero1/zero3/fsdp_grad_op repeat zero2/fsdp (the planner refuses them)
                    cells.append(
                        dict(
                            key=cell_key(gpus, strategy, method, seq, mb, ckpt),
                            gpus=gpus,
                            strategy=strategy,
                            method=method,
                            seq_len=seq,
                            micro_batch=mb,
                            ckpt=ckpt,
                        )
                    )
    return cells


def versions() -> dict:
    out = {}
    code = (
        "import json, torch, accelerate, transformers\n"
        "v = dict(torch=torch.__version__, accelerate=accelerate.__version__, transformers=transformers.__version__,"
        " cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,"
        " gpu_count=torch.cuda.device_count(),"
        " nccl='.'.join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None)\n"
        "try:\n import deepspeed; v['deepspeed'] = deepspeed.__version__\nexcept Exception: v['deepspeed'] = None\n"
        "try:\n import peft; v['peft'] = peft.__version__\nexcept Exception: v['peft'] = None\n"
        "print(json.dumps(v))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    if res.returncode == 0:
        out.update(json.loads(res.stdout.strip().splitlines()[-1]))
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    out["driver"] = smi.stdout.strip().splitlines()[0] if smi.returncode == 0 and smi.stdout.strip() else None
    return out


def plan_cell(cell: dict, cfg: Path, extra_plan: list[str]) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "generator",
        "plan",
        "--model",
        "mistral-7b",
        "--num-gpus",
        str(cell["gpus"]),
        "--strategy",
        cell["strategy"],
        "--method",
        cell["method"],
        "--seq-len",
        str(cell["seq_len"]),
        "--micro-batch",
        str(cell["micro_batch"]),
        "--global-batch",
        str(cell["micro_batch"] * cell["gpus"]),
        "--grad-checkpointing",
        "on" if cell["ckpt"] else "off",
        "--output",
        str(cfg),
        "--force",
        "--json",
        *extra_plan,
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)
    if res.returncode != 0:
        raise RuntimeError(f"plan failed: {res.stderr.strip()[-500:]}")
    return json.loads(res.stdout)


def summarise_log(log: Path) -> dict:
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip().startswith("{")]
    steps = [r for r in rows if "event" not in r and "step_time_s" in r]
    timed = steps[WARMUP_STEPS:] or steps
    if not timed:
        return {}
    step_s = statistics.median(r["step_time_s"] for r in timed)
    last = steps[-1]
    return dict(
        steps=len(steps),
        step_s=round(step_s, 4),
        tokens_per_s_per_gpu=round(statistics.median(r["tokens_per_s_per_gpu"] for r in timed), 1),
        mfu=round(statistics.median(r["mfu"] for r in timed), 4) if timed[0].get("mfu") is not None else None,
        peak_allocated_gb=max(last.get("max_mem_allocated_gb") or [0]) or None,
        peak_reserved_gb=max(last.get("max_mem_reserved_gb") or [0]) or None,
        allocated_per_rank_gb=last.get("max_mem_allocated_gb"),
        reserved_per_rank_gb=last.get("max_mem_reserved_gb"),
        losses=[round(r["loss"], 4) for r in steps],
    )


def model_dir(workdir: Path) -> Path:
    """Mistral-7B's config.json plus a locally built tokenizer: what --init random needs with no hub access."""
    out = workdir / "mistral-7b"
    if not (out / "config.json").exists():
        subprocess.run(
            [sys.executable, "tests/tiny_model.py", "mistral-7b", str(out)], cwd=REPO, check=True, timeout=300
        )
    return out


def train_command(
    cell: dict, plan: dict, cfg: Path, log: Path, model: Path, out: Path, steps: int, extra_train: list[str]
) -> list[str]:
    """The accelerate launch + train.py command for one cell, consistent with the plan the generator printed."""
    global_batch = plan["micro_batch"] * plan["num_processes"] * plan["gradient_accumulation_steps"]
    return [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(cfg), "train.py",
        "--model", str(model), "--init", "random", "--method", cell["method"],
        "--seq-len", str(cell["seq_len"]), "--micro-batch", str(cell["micro_batch"]),
        "--global-batch", str(global_batch),
        "--grad-checkpointing" if cell["ckpt"] else "--no-grad-checkpointing",
        "--max-steps", str(steps), "--warmup-steps", "2", "--save-every", "0", "--no-export",
        "--log-file", str(log), "--output-dir", str(out), *extra_train,
    ]  # fmt: skip


def run_cell(cell: dict, steps: int, workdir: Path, extra_plan: list[str], extra_train: list[str]) -> dict:
    cfg = workdir / f"{cell['key']}.yaml"
    log = workdir / f"{cell['key']}.jsonl"
    plan = plan_cell(cell, cfg, extra_plan)
    predicted = next((e for e in plan["estimates"] if e["strategy"] == plan["strategy"]), {})
    train = train_command(cell, plan, cfg, log, model_dir(workdir), workdir / cell["key"], steps, extra_train)
    env = {**os.environ, **SAFE_ENV, "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "PYTHONUNBUFFERED": "1"}
    t0 = time.time()
    res = subprocess.run(train, capture_output=True, text=True, cwd=REPO, env=env, timeout=1800)
    wall = time.time() - t0
    tail = (res.stdout + res.stderr)[-3000:]
    out = dict(cell, config=plan, predicted=predicted, wall_s=round(wall, 1), command=shlex.join(train))
    if res.returncode == 0:
        out.update(status="ok", measured=summarise_log(log))
    elif "out of memory" in tail.lower() or "OutOfMemoryError" in tail:
        out.update(
            status="oom",
            measured=summarise_log(log) if log.exists() else {},
            tail=tail[-800:],
        )
    else:
        out.update(status="error", tail=tail)
    return out


def save(results: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(results, fh, indent=1, sort_keys=True)
    os.replace(tmp, path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, help="results JSON (default bench/results/<machine>-<date>.json)")
    ap.add_argument("--machine", default=None, help="name for the results file (default from GPU count)")
    ap.add_argument("--gpus", default=None, help="GPU counts to run, e.g. 1,2 (default: 1 and all)")
    ap.add_argument("--only", default=None, help="comma list of cell keys or substrings to run")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=540, help="stop before a cell would exceed this wall time")
    ap.add_argument("--cell-estimate-s", type=float, default=90, help="assumed duration of a cell not yet timed")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "bench-matrix")
    ap.add_argument("--extra-plan", default="", help="extra flags for generator plan")
    ap.add_argument("--extra-train", default="", help="extra flags for train.py (e.g. --liger)")
    args = ap.parse_args()
    start = time.time()
    env_versions = versions()
    n = int(env_versions.get("gpu_count") or 1)
    counts = [int(x) for x in args.gpus.split(",")] if args.gpus else sorted({1, n})
    machine = args.machine or f"h200-x{n}"
    path = args.results or REPO / "bench" / "results" / f"{machine}-{date.today().isoformat()}.json"
    results = json.loads(path.read_text()) if path.exists() else {"machine": machine, "cells": {}}
    results.setdefault("versions", {}).update(env_versions)
    args.workdir.mkdir(parents=True, exist_ok=True)
    cells = all_cells(counts)
    if args.only:
        wanted = args.only.split(",")
        cells = [c for c in cells if any(w in c["key"] for w in wanted)]
    durations = [c["wall_s"] for c in results["cells"].values() if "wall_s" in c]
    for cell in cells:
        if cell["key"] in results["cells"] and results["cells"][cell["key"]]["status"] in ("ok", "oom"):
            continue
        expect = max(durations) if durations else args.cell_estimate_s
        if time.time() - start + expect > args.budget_s:
            print(f"budget: stopping before {cell['key']} (resume by running again)", flush=True)
            break
        print(f"running {cell['key']} ...", flush=True)
        try:
            row = run_cell(cell, args.steps, args.workdir, shlex.split(args.extra_plan), shlex.split(args.extra_train))
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            row = dict(cell, status="error", tail=str(exc)[-800:])
        results["cells"][cell["key"]] = row
        durations.append(row.get("wall_s", args.cell_estimate_s))
        save(results, path)
        m = row.get("measured", {})
        print(
            f"  {row['status']}: step {m.get('step_s')} s, {m.get('tokens_per_s_per_gpu')} tok/s/GPU, "
            f"MFU {m.get('mfu')}, peak alloc {m.get('peak_allocated_gb')} GB "
            f"(predicted {row.get('predicted', {}).get('peak_gb')})",
            flush=True,
        )
    left = [c["key"] for c in cells if results["cells"].get(c["key"], {}).get("status") not in ("ok", "oom")]
    print(f"results: {path} ({len(cells) - len(left)}/{len(cells)} cells done)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
