"""What was measured on the recipes' reference machine (2x H200 SXM): the probe's bus bandwidth and train.py runs of
the recipe's configuration (plan --trial first, the benchmark matrix otherwise), read from bench/results/ so a recipe
quotes only numbers that are on file."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
"""The checkout: docsgen is never installed (pyproject packages only generator*), so bench/results is beside it."""
PROBE_FILE = "bench/results/probe-h200x2.json"
PROBE_WHEN = "2x H200 SXM, 2026-11-30"
"""NCCL all-reduce bus bandwidth of the two GPUs (probe run)."""
TRIAL_FILE = "bench/results/trial-h200x2-2026-11-30-calibration.json"
"""`plan --trial` on the measured machine: train.py steps under the planner's top candidates."""
MATRIX_FILES = ("bench/results/h200-x2-2026-11-30-bf16init.json", "bench/results/h200-x2-2026-11-30.json")
"""Benchmark matrices of the measured machine, newest first: a cell is quoted from the first file that ran it."""
MATRIX_FILE = MATRIX_FILES[-1]
MATRIX_WHEN = "2026-11-30"


def measured_busbw() -> float | None:
    path = REPO / PROBE_FILE
    try:
        return float(json.loads(path.read_text())["subsets"]["0,1"]["all_reduce"])
    except (OSError, KeyError, ValueError, TypeError):
        return None


DISAGREE = 0.10
"""A prediction further than this from its measured row is said to differ, in the recipe itself."""


def measured_run_line(plan) -> str:
    """The README line for the recipe's own configuration measured under train.py: the plan --trial record with its
    strategy, micro-batch and checkpointing, else the benchmark-matrix cell, else that this configuration itself was
    not measured. A prediction more than DISAGREE off the measured row says so on the same line."""
    found = _trial_line(plan) or _matrix_line(plan)
    if found is None:
        return (
            "- Training on this machine: this exact configuration was not measured (predicted only); the strategies "
            f"measured there are in `{MATRIX_FILE}` (see bench/REPORT.md)"
        )
    line, tokens, reserved = found
    e, off = plan.estimate, []
    for what, predicted, measured, unit in (
        ("tokens/s per GPU", e.tokens_per_s_per_gpu, tokens, ""),
        ("reserved memory", e.reserved_gb, reserved, " GB"),
    ):
        if abs(predicted / measured - 1) > DISAGREE:
            gap = predicted / measured - 1
            off.append(f"{what} {predicted:,.1f}{unit} predicted vs {measured:,.1f}{unit} measured ({gap:+.0%})")
    if off:
        line += f". The prediction differs from this measurement by more than {DISAGREE:.0%}: {'; '.join(off)}"
    return line


def _matrix_line(plan) -> tuple[str, float, float] | None:
    """The benchmark-matrix cell with this recipe's strategy, micro-batch, checkpointing and levers (Liger, flex
    attention), without accumulation, from the newest matrix that ran it."""
    w = plan.workload
    key = f"g{plan.num_processes}-{plan.strategy}-{w.method}-s{w.seq_len}-mb{w.micro_batch}-ckpt"
    key += "on" if w.grad_checkpointing else "off"
    key += "".join(f"-{lever}" for lever, on in (("liger", w.liger), ("flex", w.attention == "flex")) if on)
    for name in MATRIX_FILES:
        path = REPO / name
        cell = (json.loads(path.read_text())["cells"] if path.exists() else {}).get(key, {})
        if cell.get("status") == "ok":
            m = cell["measured"]
            line = (
                f"- Measured on this machine with train.py (benchmark matrix, {MATRIX_WHEN}, the same strategy, "
                f"micro-batch, checkpointing and kernels, global batch {w.micro_batch * plan.num_processes} instead "
                f"of {plan.global_batch}): {m['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU, MFU {m['mfu']:.1%}, "
                f"{m['peak_allocated_gb']:.1f} GB allocated, {m['peak_reserved_gb']:.1f} GB reserved: `{name}`"
            )
            return line, m["tokens_per_s_per_gpu"], m["peak_reserved_gb"]
    return None


def _trial_line(plan) -> tuple[str, float, float] | None:
    """The trial measurement of this recipe's strategy, micro-batch and checkpointing on the measured machine."""
    w = plan.workload
    path = REPO / TRIAL_FILE
    records = json.loads(path.read_text())["measurements"] if path.exists() else []
    same = [
        r
        for r in records
        if r["status"] == "ok"
        and (r["strategy"], r["method"], r["seq_len"], r["micro_batch"], r["grad_checkpointing"])
        == (plan.strategy, w.method, w.seq_len, w.micro_batch, w.grad_checkpointing)
    ]
    if not same:
        return None
    r = same[0]
    line = (
        f"- Measured on this machine with train.py (`plan --trial`, {r['time'][:10]}, the same strategy, micro-batch "
        f"and checkpointing, global batch {r['micro_batch'] * r['num_processes'] * r['grad_accum']} instead of "
        f"{plan.global_batch}): {r['measured_tokens_per_s_per_gpu']:,.0f} tokens/s per GPU, "
        f"{r['measured_peak_reserved_gb']:.1f} GB reserved: `{TRIAL_FILE}`"
    )
    return line, r["measured_tokens_per_s_per_gpu"], r["measured_peak_reserved_gb"]
