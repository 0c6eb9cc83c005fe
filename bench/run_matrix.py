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
import fnmatch
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
if str(REPO) not in sys.path:  # run as a script (python bench/run_matrix.py) without the package installed
    sys.path.insert(0, str(REPO))

from bench.harness import model_dir, versions  # noqa: E402
from bench.matrix_runner import DONE, Runner  # noqa: E402
from bench.wires import NVLINK, SLOW_WIRES, WIRE_STEPS, cell_env, wire_cells, wire_of, wire_plan_flags  # noqa: E402
from generator.catalog import strategies as catalog  # noqa: E402
from generator.plan.policy import tie_rank  # noqa: E402
from generator.trial.metrics import looks_oom, read_steps  # noqa: E402

WARMUP_STEPS = 5

# (strategy, method): a full fine-tune under every strategy one machine runs on its GPUs alone (no CPU offload, no HSDP,
# which needs two shard groups), in the planner's tie order; LoRA under DDP only (adapters are tiny, sharding buys
# nothing).
_ON_GPUS = catalog.select(lambda s: s.offload == "none" and not s.hybrid)
STRATEGIES = [(s.name, "full") for s in sorted(_ON_GPUS, key=lambda s: tie_rank(s.name))] + [("ddp", "lora")]
WORKLOADS = [(4096, 1), (1024, 4)]
# Mean tokens per example of train.py's default dataset (recipes/data/synthetic_instruct.jsonl) under the character
# tokenizer of tests/tiny_model.py, which the matrix's Mistral-7B directory carries: what flex_attention's skipped
# work depends on (tests/test_bench_matrix.py recomputes it).
BENCH_DOC_TOKENS = 54
# Throughput levers for issue 5's MFU target, on top of the matrix's FSDP2 cells: (gpus, strategy, method, seq, mb,
# ckpt, variant). Variants: "liger" = Liger kernels (train.py --liger, and the estimator told so); "compile" =
# accelerate's regional torch.compile of the repeated decoder layers; "flex" = transformers' flex_attention instead of
# SDPA (packing and Mistral's sliding window make SDPA take a dense mask, which rules out its flash kernel). QLoRA
# runs from a random init too: train.py quantises it in memory.
LEVERS = [
    (2, "fsdp", "full", 4096, 1, False, "liger"),
    (2, "fsdp", "full", 4096, 2, False, "liger"),
    (2, "fsdp", "full", 4096, 4, False, "liger"),
    (2, "fsdp", "full", 4096, 2, False, "liger-compile"),
    (2, "fsdp", "full", 4096, 2, False, "liger-flex"),
    (2, "fsdp_grad_op", "full", 4096, 2, False, "liger"),  # the planner's pick with --liger on 2x H200
    (2, "fsdp_grad_op", "full", 4096, 2, False, "liger-flex"),
    (2, "fsdp", "full", 4096, 1, False, "liger-flex"),
    (2, "fsdp", "full", 4096, 4, False, "liger-flex"),
    (1, "ddp", "qlora", 4096, 1, True, ""),
]
# Issue 21: Liger under FSDP2 no-reshard beside its plain twin (run 3; FSDP2's pair is already above), and the
# planner's picks with gradient accumulation (run 4, variant "ga<N>": global batch = micro-batch x GPUs x N): 2x H200
# full seq 4096 global batch 8 (ZeRO-1 is `plan`'s pick today, FSDP2 no-reshard the one the issue names) and the
# fast recipe's ZeRO-1 micro-batch 1 x 32 with Liger and flex.
LEVERS += [
    (2, "fsdp_grad_op", "full", 4096, 1, False, "liger"),
    (2, "zero1", "full", 4096, 1, False, "ga4"),
    (2, "fsdp_grad_op", "full", 4096, 1, False, "ga4"),
    (2, "zero1", "full", 4096, 1, False, "liger-flex-ga32"),
]
# The slow wires (issue 21, run 1): the core strategies under the host path and sockets, variant = the wire's name.
LEVERS += wire_cells()
LAUNCH_FLAGS = {"compile": ["--dynamo_backend", "inductor", "--dynamo_use_regional_compilation"]}
TRAIN_FLAGS = {"liger": ["--liger"], "flex": ["--attn-implementation", "flex_attention"]}
# A cell whose predicted peak allocated memory exceeds the card by more than this is recorded as skipped, not launched:
# a 7B launch costs ~40 s of scarce GPU time just to hit the out-of-memory it was predicted to hit. Cells predicted
# near the edge still run: whether they fit is what the matrix is for.
SKIP_PREDICTED_OVER = 1.05
PLAN_HEADROOM = 0.10  # generator plan's default --headroom


def cell_key(gpus: int, strategy: str, method: str, seq: int, mb: int, ckpt: bool, variant: str = "") -> str:
    key = f"g{gpus}-{strategy}-{method}-s{seq}-mb{mb}-ckpt{'on' if ckpt else 'off'}"
    return f"{key}-{variant}" if variant else key


def make_cell(gpus, strategy, method, seq, mb, ckpt, variant="") -> dict:
    return dict(
        key=cell_key(gpus, strategy, method, seq, mb, ckpt, variant),
        gpus=gpus,
        strategy=strategy,
        method=method,
        seq_len=seq,
        micro_batch=mb,
        ckpt=ckpt,
        variant=variant,
    )


def all_cells(gpu_counts: list[int]) -> list[dict]:
    cells = []
    for gpus in gpu_counts:
        for seq, mb in WORKLOADS:
            for ckpt in (True, False):
                for strategy, method in STRATEGIES:
                    if gpus == 1 and catalog.strategy(strategy).one_gpu_twin:
                        continue  # one GPU: zero1/zero3/fsdp_grad_op repeat zero2/fsdp (the planner refuses them)
                    cells.append(make_cell(gpus, strategy, method, seq, mb, ckpt))
    cells += [make_cell(*lever) for lever in LEVERS if lever[0] in gpu_counts]
    return cells


def select(cells: list[dict], patterns: list[str]) -> list[dict]:
    """Cells matching the glob patterns, in the patterns' order (so the order on the command line is the priority).
    A slow-wire cell is selected only by a pattern that names its wire: it needs that wire's probe first, and the
    broad patterns of a plain session (`g2-*-s1024-*`) must not pick it up."""
    out: list[dict] = []
    for pat in patterns:
        named = [w for w in SLOW_WIRES if w in pat]
        out += [
            c for c in cells if fnmatch.fnmatchcase(c["key"], pat) and c not in out and wire_of(c) in (NVLINK, *named)
        ]
    return out


def variant_parts(cell: dict) -> set[str]:
    return set(filter(None, cell.get("variant", "").split("-")))


def grad_accum(cell: dict) -> int:
    """The accumulation steps a `ga<N>` variant asks for (1 without)."""
    return next((int(p[2:]) for p in variant_parts(cell) if p.startswith("ga") and p[2:].isdigit()), 1)


def cell_steps(cell: dict, steps: int) -> int:
    """Fewer steps where one step is long: a sockets all-reduce, or many accumulation micro-steps (5 stay warm-up)."""
    if grad_accum(cell) >= 8:
        return min(steps, 8)
    return min(steps, WIRE_STEPS.get(wire_of(cell), steps))


def plan_cell(cell: dict, cfg: Path, extra_plan: list[str], lane: int | None = None, n_gpus: int = 0) -> dict:
    """The generator's plan and config for this cell; lane pins a 1-GPU cell to one GPU (the others excluded). A
    slow-wire cell's probe is looked up beside its config."""
    pin = wire_plan_flags(cell, cfg.parent)
    if lane is not None and n_gpus > 1:
        pin += ["--exclude", ",".join(str(i) for i in range(n_gpus) if i != lane)]
    cmd = [
        sys.executable, "-m", "generator", "plan", "--model", "mistral-7b", "--num-gpus", str(cell["gpus"]),
        "--strategy", cell["strategy"], "--method", cell["method"], "--seq-len", str(cell["seq_len"]),
        "--micro-batch", str(cell["micro_batch"]),
        "--global-batch", str(cell["micro_batch"] * cell["gpus"] * grad_accum(cell)),
        "--grad-checkpointing", "on" if cell["ckpt"] else "off", "--output", str(cfg), "--force", "--json",
        "--no-compile-layers",  # the matrix runs train.py's layers eager (its compile cells are Accelerate's dynamo)
        *(["--liger"] if "liger" in variant_parts(cell) else []), *pin, *extra_plan,
        *(["--attention", "flex", "--doc-tokens", str(BENCH_DOC_TOKENS)] if "flex" in variant_parts(cell) else []),
    ]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)
    if res.returncode != 0:
        raise RuntimeError(f"plan failed: {res.stderr.strip()[-500:]}")
    return json.loads(res.stdout)


def summarise_log(log: Path) -> dict:
    steps = read_steps(log)  # tolerates a line cut short when a rank was killed
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
        grad_norms=[None if r.get("grad_norm") is None else round(r["grad_norm"], 4) for r in steps],
    )


def train_command(
    cell: dict, plan: dict, cfg: Path, log: Path, model: Path, out: Path, steps: int, extra_train: list[str]
) -> list[str]:
    """The accelerate launch + train.py command for one cell, consistent with the plan the generator printed."""
    global_batch = plan["micro_batch"] * plan["num_processes"] * plan["gradient_accumulation_steps"]
    parts = variant_parts(cell)
    launch = [f for part in sorted(parts) for f in LAUNCH_FLAGS.get(part, [])]
    return [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(cfg), *launch, "train.py",
        "--model", str(model), "--init", "random", "--method", cell["method"],
        "--seq-len", str(cell["seq_len"]), "--micro-batch", str(cell["micro_batch"]),
        "--global-batch", str(global_batch),
        "--grad-checkpointing" if cell["ckpt"] else "--no-grad-checkpointing",
        "--max-steps", str(steps), "--warmup-steps", "2", "--save-every", "0", "--no-export",
        "--no-fit-check",  # the matrix measures, cells predicted over the card included (their OOM is the data)
        "--log-file", str(log), "--output-dir", str(out),
        *(f for part in sorted(parts) for f in TRAIN_FLAGS.get(part, [])), *extra_train,
    ]  # fmt: skip


def predicted_over(predicted: dict) -> float | None:
    """Predicted peak allocated memory over the whole card (the plan's capacity is after its default 10% headroom),
    or None when the plan does not say."""
    cap, need = predicted.get("capacity_gb"), predicted.get("peak_gb")
    return need / (cap / (1 - PLAN_HEADROOM)) if cap and need else None


def run_cell(
    cell: dict,
    steps: int,
    workdir: Path,
    extra_plan: list[str],
    extra_train: list[str],
    lane: int | None = None,
    n_gpus: int = 0,
) -> dict:
    cfg = workdir / f"{cell['key']}.yaml"
    log = workdir / f"{cell['key']}.jsonl"
    plan = plan_cell(cell, cfg, extra_plan, lane, n_gpus)
    predicted = next((e for e in plan["estimates"] if e["strategy"] == plan["strategy"]), {})
    over = predicted_over(predicted)
    if over is not None and over > SKIP_PREDICTED_OVER:
        return dict(cell, config=plan, predicted=predicted, status="skipped", tail=f"predicted {over:.2f}x the GPU")
    model = model_dir(workdir)  # QLoRA too: train.py quantises the random init in memory (issue 17)
    steps = cell_steps(cell, steps)
    train = train_command(cell, plan, cfg, log, model, workdir / cell["key"], steps, extra_train)
    env = cell_env(cell, os.environ)
    if log.exists():
        log.unlink()  # a retried cell must not summarise the failed attempt's steps
    t0 = time.time()
    res = subprocess.run(train, capture_output=True, text=True, cwd=REPO, env=env, timeout=1800)
    wall = time.time() - t0
    tail = (res.stdout + res.stderr)[-3000:]
    out = dict(cell, config=plan, predicted=predicted, wall_s=round(wall, 1), command=shlex.join(train))
    if res.returncode == 0:
        out.update(status="ok", measured=summarise_log(log))
    elif looks_oom(tail):
        out.update(
            status="oom",
            measured=summarise_log(log) if log.exists() else {},
            tail=tail[-800:],
        )
    else:
        out.update(status="error", tail=tail)
    return out


def report_line(row: dict) -> str:
    m, p = row.get("measured", {}), row.get("predicted", {})
    if row["status"] == "skipped":
        return f"  skipped: {row.get('tail')}"
    return (
        f"  {row['status']}: step {m.get('step_s')} s, {m.get('tokens_per_s_per_gpu')} tok/s/GPU, MFU {m.get('mfu')}, "
        f"peak alloc {m.get('peak_allocated_gb')} GB (predicted {p.get('peak_gb')}), wall {row.get('wall_s')} s"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, help="results JSON (default bench/results/<machine>-<date>.json)")
    ap.add_argument("--also-write", type=Path, help="a second copy of the results JSON, rewritten after every cell")
    ap.add_argument("--machine", default=None, help="name for the results file (default from GPU count)")
    ap.add_argument("--gpus", default=None, help="GPU counts to run, e.g. 1,2 (default: 1 and all)")
    ap.add_argument("--only", default=None, help="comma list of cell-key glob patterns, run in this order")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=540, help="stop before a cell would exceed this wall time")
    ap.add_argument("--cell-estimate-s", type=float, default=90, help="assumed duration of a cell not yet timed")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "bench-matrix")
    ap.add_argument("--extra-plan", default="", help="extra flags for generator plan")
    ap.add_argument("--extra-train", default="", help="extra flags for train.py")
    ap.add_argument("--list", action="store_true", help="print the cell keys and exit")
    args = ap.parse_args()
    if args.list:
        print("\n".join(c["key"] for c in all_cells([1, 2])))
        return 0
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
        cells = select(cells, args.only.split(","))
    model_dir(args.workdir)  # once, before any lane needs it
    paths = [path] + ([args.also_write] if args.also_write else [])
    Runner(args, results, paths, n, start, run_cell, report_line).run(cells)
    left = [c["key"] for c in cells if results["cells"].get(c["key"], {}).get("status") not in DONE]
    print(f"results: {path} ({len(cells) - len(left)}/{len(cells)} cells done)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
