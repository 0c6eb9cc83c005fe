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


def default_engines() -> Engines:
    from generator.estimate import applicable, estimate_all
    from generator.topology import best_subset, order_for_hsdp, subset_busbw_gbps

    return Engines(estimate_all, applicable, best_subset, order_for_hsdp, subset_busbw_gbps)
