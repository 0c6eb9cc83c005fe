"""Memory: does the model fit per GPU under this config's strategy (the estimator's predicted numbers)."""

from __future__ import annotations

from generator.check.types import CheckContext, Finding
from generator.check.view import as_int, gpu_ids, num_machines, per_node_processes, section, strategy


def placement_of(cfg: dict, ctx: CheckContext, gpus: int):
    from generator.estimate.types import Placement
    from generator.topology import subset_busbw_gbps

    ids = gpu_ids(cfg)
    if not isinstance(ids, list) or not set(ids) <= set(ctx.topo.indices):
        ids = list(ctx.topo.indices)[:gpus]
    gpu = ctx.topo.gpu(ids[0])
    busbw = subset_busbw_gbps(ctx.topo, ids[:gpus]) if gpus > 1 else 0.0
    machines = num_machines(cfg)
    shard = as_int(section(cfg, "parallelism_config").get("parallelism_config_dp_shard_size"))
    return Placement(
        num_gpus_per_machine=gpus,
        gpu_name=gpu.name,
        gpu_memory_gb=gpu.memory_gb,
        busbw_gbps=busbw,
        num_machines=machines,
        inter_node_gbps=(ctx.topo.inter_node_gbps or 25.0) if machines > 1 else None,
        shard_size=shard if shard and shard < gpus else None,
    )


def memory_fit(cfg: dict, ctx: CheckContext) -> list[Finding]:
    name = strategy(cfg)
    if ctx.model is None or ctx.topo is None or name is None:
        return []
    from generator.check.rules_parallel import model_parallel

    if model_parallel(cfg):  # TP/CP/SP change every term: rules_parallel.parallel_memory prices those
        return []
    from generator.catalog import strategies as catalog
    from generator.estimate import estimate

    gpus = per_node_processes(cfg) or 1
    if gpus > len(ctx.topo.gpus):
        return []
    placement = placement_of(cfg, ctx, gpus)
    est = estimate(ctx.model, ctx.workload, placement, name)
    w = ctx.workload
    what = f"{ctx.model.name}, {w.method}, seq {w.seq_len}, micro-batch {w.micro_batch}, --script {w.script}"
    other = _other_script(ctx, placement, name)
    if other and not est.fits:
        return [
            Finding(
                "warning",
                "distributed_type",
                f"{name} will not fit if launched with a {w.script} script: predicted {est.reserved_gb:.1f} GB "
                f"reserved per GPU, {est.capacity_gb:.1f} GB usable ({what}); {other}.",
                f"launch it with {ctx.written_for.script} as its header says, or plan for your script: "
                f"python -m generator plan --script {w.script}.",
                "memory_fit",
            )
        ]
    if est.fits:
        return [
            Finding(
                "info",
                "distributed_type",
                f"{name} fits: predicted {est.reserved_gb:.1f} GB reserved per "
                f"GPU of {est.capacity_gb:.1f} GB usable ({what}).",
                "none needed.",
                "memory_fit",
            )
        ]
    fitting = []
    for s in catalog.ALL:
        if s.name != name and (not s.hybrid or placement.shard_size):
            alt = estimate(ctx.model, ctx.workload, placement, s.name)
            if alt.fits:
                fitting.append(f"{s.name} ({alt.reserved_gb:.0f} GB)")
    fix = (
        f"strategies predicted to fit: {', '.join(fitting[:4])}; `python -m generator plan` picks one."
        if fitting
        else "use more GPUs, LoRA/QLoRA, a shorter sequence or a smaller micro-batch."
    )
    return [
        Finding(
            "error",
            "distributed_type",
            f"{name} will not fit: predicted {est.reserved_gb:.1f} GB reserved "
            f"per GPU, {est.capacity_gb:.1f} GB usable ({what}).",
            fix,
            "memory_fit",
        )
    ]


def _other_script(ctx: CheckContext, placement, name: str) -> str | None:
    """What the config was planned for, when that is another script than the one checked (None otherwise)."""
    planned = ctx.written_for
    if planned is None or planned.script == ctx.workload.script:
        return None
    from generator.estimate import estimate

    est = estimate(ctx.model, planned, placement, name)
    return f"it was written for {planned.script}, predicted {est.reserved_gb:.1f} GB there"


RULES = [memory_fit]
