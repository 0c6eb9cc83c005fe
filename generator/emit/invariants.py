"""Consistency checks on a Plan before anything is emitted.

A Plan that breaks one of these is a planner bug (ValueError), except a missing rendezvous address, which the user
supplies (UserError). Accelerate itself checks none of this: extra processes silently share GPUs.
"""

from __future__ import annotations

from generator.catalog import strategies as catalog
from generator.errors import UserError
from generator.plan.types import Plan


def check_plan(plan: Plan) -> None:
    """Raise if the plan cannot be turned into a config that launches the job it describes."""
    if not catalog.is_known(plan.strategy):
        raise ValueError(f"unknown strategy {plan.strategy!r}; expected one of {', '.join(catalog.NAMES)}")
    ids = plan.gpu_ids
    if not ids:
        raise ValueError("plan has no GPU ids")
    if any(not isinstance(i, int) or isinstance(i, bool) or i < 0 for i in ids):
        raise ValueError(f"GPU ids must be non-negative integers, got {ids!r}")
    if len(set(ids)) != len(ids):
        raise ValueError(f"GPU ids repeat: {ids!r} (two processes would share one GPU)")
    if plan.num_machines < 1:
        raise ValueError(f"num_machines must be at least 1, got {plan.num_machines}")
    if not 0 <= plan.machine_rank < plan.num_machines:
        raise ValueError(f"machine_rank {plan.machine_rank} is outside 0..{plan.num_machines - 1}")
    if plan.num_processes % plan.num_machines or plan.num_processes // plan.num_machines != len(ids):
        raise ValueError(
            f"{plan.num_processes} processes over {plan.num_machines} machine(s) do not match {len(ids)} GPU ids each"
        )
    w = plan.workload
    # A TP x CP group trains one sequence together: only the data-parallel ranks split the batch.
    lay = plan.parallel.layout if plan.parallel else None
    dp = plan.num_processes // (lay.tp * lay.cp) if lay else plan.num_processes
    if lay and lay.size != plan.num_processes:
        raise ValueError(f"parallel layout {lay.label} needs {lay.size} processes, the plan has {plan.num_processes}")
    if w.micro_batch * w.grad_accum * dp != plan.global_batch:
        raise ValueError(
            f"global batch {plan.global_batch} != micro-batch {w.micro_batch} x accumulation {w.grad_accum} "
            f"x {dp} data-parallel processes"
        )
    if plan.num_machines > 1 and not plan.main_process_ip:
        raise UserError("a multi-machine config needs the main machine's address; pass --main-process-ip")
    if not 0 <= plan.main_process_port <= 65535:
        raise UserError(f"main process port {plan.main_process_port} is not a TCP port; choose one in 1..65535")
    if catalog.strategy(plan.strategy).hybrid:
        _check_hsdp(plan)


def _check_hsdp(plan: Plan) -> None:
    """HSDP shard groups are contiguous rank blocks; they must tile the job and not straddle machines unevenly."""
    shard, replicate, per_node = plan.hsdp_shard, plan.hsdp_replicate, len(plan.gpu_ids)
    if shard < 2:
        raise ValueError(f"hsdp needs a shard group of at least 2 GPUs, got {shard} (use ddp instead)")
    if shard * replicate != plan.num_processes:
        raise ValueError(f"hsdp {replicate} x {shard} does not cover {plan.num_processes} processes")
    if (shard <= per_node and per_node % shard) or (shard > per_node and shard % per_node):
        raise ValueError(f"hsdp shard groups of {shard} do not align with {per_node} GPUs per machine")
