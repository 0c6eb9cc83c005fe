"""Read a trial's per-step JSONL (train.py --log-file) into the numbers a trial reports."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError", "out of memory")
"""Text torch/CUDA print when an allocation fails (any rank's output)."""


@dataclass(frozen=True)
class Measured:
    steps: int
    """Optimizer steps logged."""
    warmup: int
    """Leading steps left out of the medians (compilation, allocator growth, NCCL set-up)."""
    step_s: float
    """Median optimizer-step time after warm-up, seconds."""
    tokens_per_s_per_gpu: float
    """Median after warm-up."""
    peak_reserved_gb: float | None
    """Largest torch.cuda.max_memory_reserved over ranks and steps; None on CPU."""
    peak_allocated_gb: float | None


def warmup_steps(n: int) -> int:
    """Leave the first steps out: 3 of 8 or more, fewer for shorter runs, always keeping at least one."""
    return max(0, min(3, n - 1))


def read_steps(path: str | Path) -> list[dict]:
    p = Path(path)
    if not p.exists():
        return []
    out = []
    for line in p.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a line cut short by a kill
        if isinstance(rec, dict) and "event" not in rec and isinstance(rec.get("step_time_s"), int | float):
            out.append(rec)
    return out


def summarize(steps: list[dict]) -> Measured | None:
    if not steps:
        return None
    skip = warmup_steps(len(steps))
    steady = steps[skip:]
    return Measured(
        steps=len(steps),
        warmup=skip,
        step_s=statistics.median(s["step_time_s"] for s in steady),
        tokens_per_s_per_gpu=statistics.median(float(s["tokens_per_s_per_gpu"]) for s in steady),
        peak_reserved_gb=_peak(steps, "max_mem_reserved_gb"),
        peak_allocated_gb=_peak(steps, "max_mem_allocated_gb"),
    )


def _peak(steps: list[dict], key: str) -> float | None:
    values = []
    for s in steps:
        v = s.get(key)
        values += v if isinstance(v, list) else [v]
    values = [v for v in values if isinstance(v, int | float)]
    return max(values) if values else None


def looks_oom(output: str) -> bool:
    return any(m in output for m in OOM_MARKERS)
