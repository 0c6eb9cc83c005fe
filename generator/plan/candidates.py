"""Which GPUs a job of k GPUs per machine would use, and the Placement the estimator sees for them."""

from __future__ import annotations

from dataclasses import dataclass

from generator.errors import UserError
from generator.estimate.types import Placement
from generator.plan.bandwidth_file import MeasuredBandwidth
from generator.plan.engines import Engines
from generator.plan.types import PlanRequest
from generator.topology.types import Topology


@dataclass(frozen=True)
class GpuChoice:
    gpu_ids: tuple[int, ...]
    """PCI order."""
    hsdp_ids: tuple[int, ...]
    """The same GPUs with each NVLink island a contiguous block (the rank order HSDP needs)."""
    shard_size: int
    """GPUs per island inside this choice (= len(gpu_ids) when it stays in one island)."""
    busbw_gbps: float
    shard_busbw_gbps: float
    spans_islands: bool
    measured: bool
    """busbw_gbps comes from a bandwidth file rather than the topology table."""
    reason: str


def free_gpus(topology: Topology, request: PlanRequest) -> tuple[int, ...]:
    unknown = sorted(set(request.exclude) - set(topology.indices))
    if unknown:
        raise UserError(f"--exclude names GPU(s) {unknown} but this machine has GPUs {list(topology.indices)}")
    free = tuple(i for i in topology.indices if i not in request.exclude)
    if not free:
        raise UserError(f"every GPU is excluded ({list(request.exclude)}); exclude fewer with --exclude")
    if request.num_gpus is not None and request.num_gpus > len(free):
        busy = f" ({len(request.exclude)} excluded)" if request.exclude else ""
        raise UserError(f"asked for {request.num_gpus} GPUs but only {len(free)} are free{busy}; lower --num-gpus")
    return free


def gpu_choices(
    topology: Topology, request: PlanRequest, engines: Engines, measured: MeasuredBandwidth | None = None
) -> list[GpuChoice]:
    """One choice per GPU count: the requested one, or ("as many as help") 1, 2, 4, ... and all free GPUs."""
    free = free_gpus(topology, request)
    counts = [request.num_gpus] if request.num_gpus is not None else auto_counts(len(free))
    return [_choose(topology, k, request.exclude, engines, measured or {}) for k in counts]


def auto_counts(free: int) -> list[int]:
    """Powers of two up to `free`, plus `free` itself: data-parallel jobs split batches evenly over powers of two, and
    every extra count costs a full estimate; with GPUs excluded, "all that are left" is the other natural choice."""
    counts, k = [], 1
    while k < free:
        counts.append(k)
        k *= 2
    return [*counts, free]


def _choose(topology, k: int, exclude, engines: Engines, measured: MeasuredBandwidth) -> GpuChoice:
    sel = engines.best_subset(topology, k, exclude=tuple(exclude))
    ids, busbw, reason, is_measured = tuple(sorted(sel.gpu_ids)), float(sel.busbw_gbps), sel.reason, False
    if frozenset(ids) in measured:
        busbw, is_measured = measured[frozenset(ids)], True
    # A measured subset of the same size beats the table's pick when it is faster.
    for subset, gbps in sorted(measured.items(), key=lambda kv: (-kv[1], sorted(kv[0]))):
        usable = len(subset) == k and not subset & set(exclude) and subset <= set(topology.indices)
        if usable and gbps > busbw:
            reason = f"GPUs {_ids(subset)} measured fastest for {k} GPUs"
            ids, busbw, is_measured = tuple(sorted(subset)), gbps, True
            break
    if k == 1:
        return GpuChoice(ids, ids, 1, 0.0, 0.0, False, is_measured, reason)
    hsdp_ids, shard = engines.order_for_hsdp(topology, ids)
    hsdp_ids = tuple(hsdp_ids)
    spans = shard < k
    block = hsdp_ids[:shard]
    shard_bw = busbw
    if spans:
        shard_bw = measured.get(frozenset(block)) or (engines.subset_busbw(topology, block) if shard > 1 else 0.0)
    return GpuChoice(ids, hsdp_ids, shard, busbw, float(shard_bw), spans, is_measured, reason)


def placement_for(
    choice: GpuChoice, topology: Topology, request: PlanRequest, inter_node_gbps: float | None
) -> Placement:
    first = topology.gpu(choice.gpu_ids[0])
    return Placement(
        num_gpus_per_machine=len(choice.gpu_ids),
        gpu_name=first.name,
        gpu_memory_gb=min(topology.gpu(i).memory_gb for i in choice.gpu_ids),
        busbw_gbps=choice.busbw_gbps,
        num_machines=request.num_machines,
        inter_node_gbps=inter_node_gbps,
        shard_size=choice.shard_size,
        shard_busbw_gbps=choice.shard_busbw_gbps,
    )


def _ids(ids) -> str:
    return ",".join(str(i) for i in sorted(ids))
