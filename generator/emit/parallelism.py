"""The `parallelism_config` block and the header lines for a tensor/context-parallel plan (accelerate 1.15).

Keys as `accelerate launch` reads them from a YAML (commands/launch.py: every key carries the
`parallelism_config_` prefix; utils/launch.py `prepare_extend_env_parallelism_config` turns them into
`PARALLELISM_CONFIG_*` variables, which `ParallelismConfig()` reads in the child). `cp_comm_strategy` is exported only
when cp_size > 1; `sp_*` keys are not written (DeepSpeed's sequence parallel is not planned).
"""

from __future__ import annotations

from generator.plan.types import Plan

PREFIX = "parallelism_config_"
CP_COMM_STRATEGY = "allgather"
"""torch context parallel's K/V rotation: accelerate's default, and what generator.estimate.parallel prices."""


def parallelism_block(plan: Plan) -> dict:
    """The `parallelism_config` mapping for a plan with TP/CP groups (empty for one without)."""
    if plan.parallel is None:
        return {}
    lay = plan.parallel.layout
    block = {
        PREFIX + "dp_replicate_size": lay.dp_replicate,
        PREFIX + "dp_shard_size": lay.dp_shard,
        PREFIX + "tp_size": lay.tp,
        PREFIX + "cp_size": lay.cp,
    }
    if lay.cp > 1:
        block[PREFIX + "cp_backend"] = "torch"
        block[PREFIX + "cp_comm_strategy"] = CP_COMM_STRATEGY
    return block


def data_parallel_text(plan: Plan) -> str:
    """Who splits the global batch, for the header's workload line."""
    if plan.parallel is None:
        return f"{plan.num_processes} GPU(s)"
    lay = plan.parallel.layout
    dp = plan.num_processes // (lay.tp * lay.cp)
    return f"{dp} data-parallel group(s) of {lay.tp * lay.cp} GPUs"


def header_lines(plan: Plan) -> list[str]:
    """What each group is and on which GPUs; every number predicted."""
    if plan.parallel is None:
        return []
    lay = plan.parallel.layout
    lines = [
        f"Parallel layout {lay.label} (accelerate parallelism_config, mesh dp_replicate {lay.dp_replicate} x "
        f"dp_shard {lay.dp_shard} x cp {lay.cp} x tp {lay.tp}; predicted, not measured):"
    ]
    lines += [f"  {line}" for line in plan.parallel.describe()]
    bws = [("TP", lay.tp, lay.tp_busbw_gbps), ("CP", lay.cp, lay.cp_busbw_gbps)]
    wires = [f"{name} group {bw:.0f} GB/s" for name, size, bw in bws if size > 1]
    lines.append(f"  priced at predicted bus bandwidths: {', '.join(wires)}, FSDP group {lay.fsdp_busbw_gbps:.0f} GB/s")
    if lay.tp > 1:
        lines.append(
            "  train.py loads the weights with tp_plan='auto' on the TP mesh (q/k/v/gate/up column-wise, o/down "
            "row-wise; needs a checkpoint, not --init random)."
        )
    if lay.cp > 1:
        lines.append(
            "  train.py runs forward and backward inside accelerator.maybe_context_parallel: SDPA, causal over the "
            "whole packed sequence (context parallel takes no per-document mask), labels shifted before the split."
        )
    lines.append("  Not yet run on GPUs: the TP/CP numbers above and this path of train.py await a multi-GPU machine.")
    return lines
