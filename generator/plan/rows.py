"""What the planner ranks: each GPU choice and batch setting with its estimates (Option), and one strategy's estimate
on it (Row). Shared by the planner, its choice rule (policy), its reasons and its advice."""

from __future__ import annotations

from dataclasses import dataclass

from generator.estimate.types import Estimate, Placement, Workload
from generator.plan.batch import BatchOption
from generator.plan.candidates import GpuChoice


@dataclass(frozen=True)
class Option:
    """One GPU choice and batch setting, with every applicable strategy estimated on it."""

    choice: GpuChoice
    """Which GPUs (and, for HSDP, their order and shard size), with the reason they were chosen."""
    placement: Placement
    """The GPUs as the estimator sees them: count, name, memory, bus bandwidth, machines."""
    batch: BatchOption
    """Micro-batch, accumulation and checkpointing."""
    workload: Workload
    """The request's workload with this batch setting, as estimated."""
    estimates: tuple[Estimate, ...]
    """One per applicable strategy."""
    not_applicable: tuple[tuple[str, str], ...]
    """(strategy, why it cannot run on this placement)."""


@dataclass(frozen=True)
class Row:
    """One strategy on one Option: the unit the planner ranks."""

    option: Option
    """The GPU choice and batch setting."""
    estimate: Estimate
    """That strategy's estimate on it."""

    @property
    def total_tps(self) -> float:
        return self.estimate.tokens_per_s_per_gpu * self.option.placement.num_gpus

    @property
    def num_gpus(self) -> int:
        return self.option.placement.num_gpus
