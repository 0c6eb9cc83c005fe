"""The functions the planner calls from the topology engine and the estimator, gathered so tests can swap in fakes.

The real ones are imported lazily: the planner module itself stays importable without either engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Engines:
    estimate_all: Callable[..., list[Any]]
    """(model, workload, placement, strategies=..., headroom=...) -> list[Estimate]."""
    applicable: Callable[..., str | None]
    """(strategy, workload, placement) -> None, or why the strategy cannot run there."""
    best_subset: Callable[..., Any]
    """(topology, k, exclude=()) -> Selection(gpu_ids, busbw_gbps, spans_islands, reason)."""
    order_for_hsdp: Callable[..., tuple[tuple[int, ...], int]]
    """(topology, gpu_ids) -> (ids with each island a contiguous block, shard size)."""
    subset_busbw: Callable[..., float]
    """(topology, gpu_ids) -> predicted all-reduce busbw, GB/s."""


def default_engines(compute: Any = None) -> Engines:
    """`compute`: a ComputeTable (plan --compute-file) that every placement the planner estimates carries."""
    from generator.estimate import applicable, estimate_all
    from generator.topology import best_subset, order_for_hsdp, subset_busbw_gbps

    if compute is not None:
        estimate_all = _with_compute(estimate_all, compute)
    return Engines(estimate_all, applicable, best_subset, order_for_hsdp, subset_busbw_gbps)


def _with_compute(estimate_all: Callable[..., list[Any]], compute: Any) -> Callable[..., list[Any]]:
    from dataclasses import replace

    def wrapped(model, workload, placement, *args, **kwargs):
        return estimate_all(model, workload, replace(placement, compute=compute), *args, **kwargs)

    return wrapped
