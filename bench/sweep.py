"""The sweep: sequence length x attention kernel x document length x method on one GPU, and the scripts people launch
on one and two GPUs.

Issue 17 (long sequences) and issue 18 (TRL / Trainer and plain Accelerate loops) need rows the estimator was never
fitted on; issue 21 (run 5) the scripts on two GPUs. Each cell: `python -m generator plan` writes the config for this
machine and the cell's GPU count, the cell's script runs it for a few optimizer steps on Mistral-7B's architecture with
random weights, and the per-step log gives peak memory, median step time and tokens/s. Results merge into one JSON file
after every cell, so a killed call loses one cell. A cell that needs more GPUs than the machine shows is left for a
machine that has them (`ONLY='*-g2-*' bash bench/gpu_sweep.sh 540` on two GPUs).

    python bench/sweep.py --budget-s 540 --only 'train.py-*-s32768-*'   # glob patterns, run in the order given
    python bench/sweep.py --list
    python bench/sweep.py --host-from compute.json --only '...'   # price the cells with this machine's probe's host

Cell keys: `<script>-g<GPUs>-<strategy>-<method>-s<seq>-mb<mb>-ckpt<on|off>-<sdpa|flex>-<short|fill>[-liger]`.
Documents: `short` is recipes/data/synthetic_instruct.jsonl packed (about 54 tokens per example under the bench's
character tokenizer); `fill` is one synthetic text per sequence (each document at least as long as the sequence),
written by recipes/data/make_synthetic.py --long-tokens into the work directory.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.harness import SAFE_ENV, model_dir, save, versions  # noqa: E402
from bench.sweep_cell import Cell  # noqa: E402
from bench.sweep_grid import CELLS  # noqa: E402
from generator.model.presets import PRESETS  # noqa: E402
from generator.probe.gpu_clocks import ClockSampler  # noqa: E402
from generator.trial.metrics import looks_oom, read_steps  # noqa: E402

SHORT_DATA = REPO / "recipes" / "data" / "synthetic_instruct.jsonl"
LONG_TOKENS = 33_000  # above Mistral-7B's 32768 positions, so every `fill` document fills any sequence length
SCRIPTS = {
    "train.py": ["train.py"],
    "custom": ["bench/scripts/plain_loop.py"],
    "trainer": ["bench/scripts/trl_sft.py"],
}
WARMUP = 2  # leading steps left out of the medians (allocator growth, lazy init, autotuning)
START_S = 30.0  # process start, imports, random init of 7B on the GPU, data: what a cell costs before its first step


def plan_model(cell: Cell, workdir: Path) -> str:
    """What `plan --model` is given: the preset, or for a cut model or a bench model (not a preset) its directory
    (the config train.py builds), as a user names a model by its config."""
    if cell.layers is None and cell.model in PRESETS:
        return cell.model
    return str(model_dir(workdir, cell.model, cell.layers))


def plan_command(cell: Cell, cfg: Path) -> list[str]:
    """The generator's plan for this cell on the live GPU; its JSON carries the predicted row."""
    return [
        sys.executable, "-m", "generator", "plan", "--model", plan_model(cell, cfg.parent),
        "--num-gpus", str(cell.gpus),
        "--strategy", cell.strategy, "--method", cell.method, "--seq-len", str(cell.seq_len),
        "--micro-batch", str(cell.micro_batch), "--global-batch", str(cell.global_batch),
        "--grad-checkpointing", "on" if cell.ckpt else "off", "--output", str(cfg), "--force", "--json",
        "--liger" if cell.liger else "--no-liger", "--attention", cell.attention, "--doc-tokens", str(cell.doc_tokens),
        "--script", cell.script, "--precision", cell.precision,
        "--compile-layers" if cell.compiled else "--no-compile-layers",
    ]  # fmt: skip


def dataset(cell: Cell, workdir: Path) -> Path:
    if cell.docs == "short":
        return SHORT_DATA
    path = workdir / "synthetic_long.jsonl"
    if not path.exists():
        subprocess.run(
            [sys.executable, "recipes/data/make_synthetic.py", "--long-tokens", str(LONG_TOKENS), "--rows", "16",
             "--out", str(workdir)],
            cwd=REPO, check=True, timeout=300,
        )  # fmt: skip
    return path


def train_command(cell: Cell, cfg: Path, log: Path, model: Path, data: Path, out: Path) -> list[str]:
    """accelerate launch <script> with the flags every bench script shares (see each script's --help)."""
    attn = "flex_attention" if cell.attention == "flex" else "sdpa"
    flags = [
        "--model", str(model), "--init", "random", "--method", cell.method, "--dataset", str(data),
        "--seq-len", str(cell.seq_len), "--micro-batch", str(cell.micro_batch),
        "--global-batch", str(cell.global_batch),
        "--grad-checkpointing" if cell.ckpt else "--no-grad-checkpointing",
        "--max-steps", str(cell.steps), "--attn-implementation", attn, "--log-file", str(log),
        "--output-dir", str(out), *(["--liger"] if cell.liger else []),
        *(["--precision", "fp8"] if cell.precision == "fp8" else []),
        *(["--compile-layers"] if cell.compiled else []),
        *(["--seed", str(cell.seed)] if cell.seed is not None else []),
        *(["--lora-targets", cell.lora_targets] if cell.lora_targets else []),
    ]  # fmt: skip
    if cell.script == "train.py":
        # --no-fit-check: the sweep measures, cells predicted over the card included (their OOM is the data)
        flags += ["--warmup-steps", "1", "--save-every", "0", "--no-export", "--no-fit-check"]
        if cell.method != "full":
            flags += ["--load-dtype", "bf16"]  # the LoRA/QLoRA default from issue 17 on, whatever train.py is run
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(cfg)]
    return [*launch, *SCRIPTS[cell.script], *flags]


def summarise(log: Path) -> dict:
    steps = read_steps(log)
    timed = steps[WARMUP:] or steps[-1:]
    if not timed:
        return {}
    last = steps[-1]
    med = statistics.median
    return dict(
        steps=len(steps),
        step_s=round(med(r["step_time_s"] for r in timed), 4),
        tokens_per_s_per_gpu=round(med(float(r["tokens_per_s_per_gpu"]) for r in timed), 1),
        mfu=round(med(r["mfu"] for r in timed), 4) if timed[0].get("mfu") is not None else None,
        peak_allocated_gb=max(last.get("max_mem_allocated_gb") or [0]) or None,
        peak_reserved_gb=max(last.get("max_mem_reserved_gb") or [0]) or None,
        step_times_s=[r["step_time_s"] for r in steps],
        losses=[round(r["loss"], 4) for r in steps],
        grad_norms=[None if r.get("grad_norm") is None else round(float(r["grad_norm"]), 5) for r in steps],
        **_summary_fields(log),
    )


def _summary_fields(log: Path) -> dict:
    """From train.py's summary record: the compile time it kept out of tokens/s (fp8 compiles every decoder layer)."""
    for line in reversed(log.read_text(errors="replace").splitlines()):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("event") == "summary":
            return {k: rec[k] for k in ("compile_s",) if k in rec}
    return {}


def run_cell(cell: Cell, workdir: Path, timeout_s: float = 900) -> dict:
    cfg, log = workdir / f"{cell.key}.yaml", workdir / f"{cell.key}.jsonl"
    res = subprocess.run(plan_command(cell, cfg), capture_output=True, text=True, cwd=REPO, timeout=120)
    if res.returncode != 0:
        return dict(asdict(cell), key=cell.key, status="error", tail=f"plan: {res.stderr.strip()[-600:]}")
    plan = json.loads(res.stdout)
    predicted = next((e for e in plan["estimates"] if e["strategy"] == plan["strategy"]), {})
    data = dataset(cell, workdir)
    cmd = train_command(cell, cfg, log, model_dir(workdir, cell.model, cell.layers), data, workdir / cell.key)
    env = {**os.environ, **SAFE_ENV, "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "PYTHONUNBUFFERED": "1"}
    log.unlink(missing_ok=True)
    t0 = time.time()
    # the SM clock and power over the run's busy samples: a step's GEMMs run at the clock its duty cycle leaves them
    clocks = ClockSampler()
    try:
        with clocks:
            run = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=timeout_s)
        text = run.stdout + run.stderr
        # The script's own one-line error sits above torchrun's failure table: keep it apart from the tail.
        errors = [ln for ln in text.splitlines() if "error:" in ln.lower() or "out of memory" in ln.lower()][:6]
        rc, tail = run.returncode, text[-1500:]
    except subprocess.TimeoutExpired as exc:
        rc, tail, errors = -9, f"timeout after {exc.timeout} s", []
    row = dict(
        asdict(cell), key=cell.key, doc_tokens=cell.doc_tokens, dataset=str(data.relative_to(REPO))
        if data.is_relative_to(REPO) else data.name, config=plan, predicted=predicted,
        wall_s=round(time.time() - t0, 1), command=shlex.join(cmd),
    )  # fmt: skip
    measured = summarise(log)
    if measured:
        measured["clocks"] = clocks.summary()
    if rc == 0:
        row.update(status="ok", measured=measured)
    else:
        # the error lines go first and whole: the launcher's own traceback fills the tail and used to push them out
        said = "\n".join(errors)
        row.update(status="oom" if looks_oom(said + tail) else "error", measured=measured, errors=errors, tail=tail)
    return row


def select(cells: tuple[Cell, ...], patterns: list[str]) -> list[Cell]:
    out: list[Cell] = []
    for pat in patterns:
        out += [c for c in cells if fnmatch.fnmatchcase(c.key, pat) and c not in out]
    return out


def planned_row(cell: Cell, workdir: Path) -> dict:
    """The plan's predicted row for the cell on the live GPU ({} where the plan fails: run_cell reports why)."""
    res = subprocess.run(plan_command(cell, workdir / "probe.yaml"), capture_output=True, text=True, cwd=REPO)
    if res.returncode != 0:
        return {}
    plan = json.loads(res.stdout)
    return next((e for e in plan.get("estimates", []) if e.get("strategy") == plan.get("strategy")), {})


def expected_s(cell: Cell, planned: dict) -> float:
    """A cell's cost before running it: start-up plus its steps at the plan's predicted step time (`planned`,
    planned_row's; x2 for SDPA at long sequences, which the pre-sweep estimator under-predicts by up to 2.4x)."""
    step = planned.get("step_s")
    slow = 2.5 if cell.attention == "sdpa" and cell.seq_len > 4096 else 1.3
    # flex_attention compiles its kernels in the first step: ~30 s at most lengths, a 171 s first step for Qwen2.5-7B
    # LoRA at 16,384 (h200-x1-families-qwen16k-2026-12-04.json: ptxas on one kernel for over a minute)
    compile_s = (30.0 if cell.seq_len < 16384 else 180.0) if cell.attention == "flex" else 0.0
    # the decoder layer's forward and backward graphs: float8's 25-75 s, bf16 --compile-layers' 10-20 s
    # (h200-x1-families-compile-pairs-2026-12-04.json compile_s)
    compile_s += 90.0 if cell.precision == "fp8" else 30.0 if cell.compiled else 0.0
    return START_S + compile_s + init_s(cell) + cell.steps * (step or 5.0) * slow


def init_s(cell: Cell) -> float:
    """Random init beyond Mistral-7B's (in START_S): ~20 s for an 8-13B model, QLoRA's layer-by-layer quantisation
    of Mixtral's 47B parameters about as much again (both predicted; issue 26 measures them)."""
    if cell.model == "mistral-7b":
        return 0.0
    return 40.0 if cell.method == "qlora" and cell.model.startswith("mixtral") and cell.layers is None else 20.0


def host_rows_of(probe: Path) -> list[dict]:
    """The host rows of a `probe --compute` file (the Mistral layer's and any --model's own); SystemExit naming the
    file where it has none (a --quick probe), so a call never prices its cells with rows it did not measure."""
    rows = json.loads(probe.read_text()).get("host") or []
    if not rows:
        raise SystemExit(f"{probe}: no host rows (a --quick probe times none); run the default or --full probe")
    return rows


def gpu_label(name: str | None) -> str:
    """The results file's machine prefix from the GPU's name ('NVIDIA H100 80GB HBM3' -> h100, 'NVIDIA GeForce RTX
    4090' -> rtx4090): a call for one kind can land on another (2026-12-05's call for an H200 ran on an H100), and
    bench/calibration.py prices H200 rows only."""
    words = [w for w in re.split(r"[\s_-]+", (name or "").lower()) if w and w not in ("nvidia", "geforce", "tesla")]
    for i, word in enumerate(words):
        if any(c.isdigit() for c in word):
            return "".join(words[: i + 1]) if i == 1 else word
    return "gpu"


def visible_gpus() -> int:
    """GPUs this process may use: CUDA_VISIBLE_DEVICES when set, else nvidia-smi's list (0 without either)."""
    ids = os.environ.get("CUDA_VISIBLE_DEVICES")
    if ids is not None:
        return len([i for i in ids.split(",") if i.strip()])
    try:
        out = subprocess.run(["nvidia-smi", "--list-gpus"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in out.splitlines())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--results", type=Path, default=None, help="default bench/results/h200-x<visible GPUs>-sweep-<date>.json"
    )
    ap.add_argument("--also-write", type=Path, default=None, help="a second copy, rewritten after every cell")
    ap.add_argument("--only", default="*", help="comma list of cell-key glob patterns, run in this order")
    ap.add_argument("--budget-s", type=float, default=540, help="skip a cell that would pass this wall time")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "bench-sweep")
    ap.add_argument("--list", action="store_true", help="print the cell keys and exit")
    ap.add_argument("--run-unfit", action="store_true", help="also run a cell the plan says does not fit on this "
                    "GPU (to check that it does not); by default it is skipped")  # fmt: skip
    ap.add_argument("--host-from", type=Path, action="append", default=[], metavar="COMPUTE_FILE",
                    help="a `probe --compute` file run on this machine in this call: its host rows go into the "
                    "results' `host`, which bench/calibration.py prices its rows with (repeatable)")  # fmt: skip
    args = ap.parse_args()
    cells = select(CELLS, args.only.split(","))
    if args.list:
        print("\n".join(c.key for c in cells))
        return 0
    start = time.time()
    gpus = visible_gpus()
    found = versions()
    machine = f"{gpu_label(found.get('gpu'))}-x{max(gpus, 1)}"
    path = args.results or REPO / "bench" / "results" / f"{machine}-sweep-{date.today().isoformat()}.json"
    results = json.loads(path.read_text()) if path.exists() else {"machine": machine, "cells": {}}
    results.setdefault("versions", {}).update(found)
    if os.environ.get("BENCH_PROFILE"):  # the profiler slows the steps: bench/results_rows.py reads no tokens/s here
        results["profiled"] = True
    for probe in args.host_from:  # a resumed call's results hold this probe's rows already: replaced, not doubled
        kept = [r for r in results.get("host", []) if r.get("source") != probe.name]
        results["host"] = kept + [{**r, "source": probe.name} for r in host_rows_of(probe)]
    args.workdir.mkdir(parents=True, exist_ok=True)
    model_dir(args.workdir)
    paths = [path] + ([args.also_write] if args.also_write else [])
    if args.host_from:  # written before the first cell, which may hang
        save(results, *paths)
    for cell in cells:
        if results["cells"].get(cell.key, {}).get("status") in ("ok", "oom"):
            continue
        if cell.gpus > gpus:
            print(f"gpus: skipping {cell.key} (needs {cell.gpus}, {gpus} visible)", flush=True)
            continue
        planned = planned_row(cell, args.workdir)
        if planned.get("fits") is False and not args.run_unfit:  # sized for one H200; a call can land on a smaller card
            print(f"fit: skipping {cell.key} (the plan predicts {planned.get('peak_gb')} GB allocated against "
                  f"{planned.get('capacity_gb')} usable on this GPU)", flush=True)  # fmt: skip
            continue
        need = expected_s(cell, planned)
        if time.time() - start + need > args.budget_s:
            print(f"budget: skipping {cell.key} (expects {need:.0f} s)", flush=True)
            continue
        print(f"running {cell.key} (expects {need:.0f} s) ...", flush=True)
        # a cell that hangs is stopped when the call's budget ends, so the cells before it still come back
        row = run_cell(cell, args.workdir, timeout_s=max(60.0, args.budget_s - (time.time() - start)))
        results["cells"][cell.key] = row
        save(results, *paths)
        m = row.get("measured") or {}
        print(
            f"  {row['status']}: {m.get('tokens_per_s_per_gpu')} tok/s (predicted "
            f"{row['predicted'].get('tokens_per_s_per_gpu') if row.get('predicted') else None}), alloc "
            f"{m.get('peak_allocated_gb')} reserved {m.get('peak_reserved_gb')} GB, wall {row.get('wall_s')} s"
            + (f"\n  {chr(10).join(row.get('errors') or [row['tail'][-400:]])}" if row["status"] != "ok" else ""),
            flush=True,
        )
    done = sum(results["cells"].get(c.key, {}).get("status") in ("ok", "oom") for c in cells)
    print(f"results: {path} ({done}/{len(cells)} cells done)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
