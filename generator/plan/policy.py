"""The planner's choice policy: which strategies it may choose, what counts as a tie, and how ties are broken. One
module that the planner, its reasons and its advice all import, so each rule has one owner."""

from __future__ import annotations

from generator.catalog import strategies as catalog
from generator.estimate.types import STRATEGIES
from generator.plan.kernels import kernel_rank
from generator.plan.rows import Row
from generator.plan.types import PlanRequest

GPU_COUNT_TOLERANCE = 0.05
"""More GPUs must buy at least 5% more predicted throughput to be used when the user did not fix the count."""
TIE_TOLERANCE = 0.02
"""Throughputs within 2% are a tie: the estimator cannot tell them apart."""
OFFLOAD = tuple(s.name for s in catalog.select(lambda s: s.offload != "none"))
"""Strategies `--strategy auto` considers only with --allow-offload (CPU offload: slow, so opt-in)."""


def allowed_strategies(request: PlanRequest) -> tuple[str, ...]:
    """The strategies the request lets the planner choose among: the forced one, else all but offload unless allowed."""
    if request.strategy != "auto":
        return (request.strategy,)
    return tuple(s for s in STRATEGIES if request.allow_offload or s not in OFFLOAD)


def pick(fitting: list[Row]) -> Row:
    """Rules 2 and 3 of the planner (see generator/plan/planner.py) over the rows that fit."""
    best_by_count: dict[int, float] = {}
    for r in fitting:
        best_by_count[r.num_gpus] = max(best_by_count.get(r.num_gpus, 0.0), r.total_tps)
    best = max(best_by_count.values())
    count = min(n for n, tps in best_by_count.items() if tps >= (1 - GPU_COUNT_TOLERANCE) * best)
    same_count = [r for r in fitting if r.num_gpus == count]
    top = max(r.total_tps for r in same_count)
    near = [r for r in same_count if r.total_tps >= (1 - TIE_TOLERANCE) * top]
    least_memory = {}
    for r in near:
        s = r.estimate.strategy
        least_memory[s] = min(least_memory.get(s, float("inf")), r.estimate.reserved_gb)
    strategy = min(least_memory, key=lambda s: (tie_rank(s), least_memory[s]))
    own = [r for r in near if r.estimate.strategy == strategy]
    return min(
        own,
        key=lambda r: (
            r.option.batch.grad_checkpointing,
            kernel_rank(r),
            -r.option.batch.micro_batch,
            r.estimate.reserved_gb,
        ),
    )


def tie_rank(strategy: str) -> int:
    """Among strategies the estimator cannot tell apart on speed: DDP (nothing sharded, least to go wrong), then
    PyTorch-native FSDP2 (no extra install), then DeepSpeed (an optional package built from source), offload last."""
    s = catalog.strategy(strategy)
    if s.offload != "none":
        return 3
    return {"ddp": 0, "fsdp": 1, "deepspeed": 2}[s.framework]


TIE_WHY = {
    0: "nothing sharded, least to go wrong",
    1: "PyTorch-native FSDP2, no DeepSpeed install needed",
    2: "no CPU offload",
}
"""Why each tie_rank goes first on a tie, as the plan's reasons say it."""
