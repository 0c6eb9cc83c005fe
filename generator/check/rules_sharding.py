"""Parameter sharding (FSDP full shard, ZeRO-3) over links slower than NVLink: warn only when the estimator says an
unsharded strategy (or island-sized HSDP) fits this job and is faster, so `check` agrees with what `plan` chose.

HSDP is left to rules_topology.hsdp_groups: it all-gathers inside its shard group and only all-reduces gradients
across replicas, so what matters is whether each shard group stays inside one NVLink island."""

from __future__ import annotations

from dataclasses import replace

from generator.catalog import strategies as catalog
from generator.check.rules_memory import placement_of
from generator.check.rules_topology import job_ids
from generator.check.types import CheckContext, Finding
from generator.check.view import section, sharded, strategy


def _slow_path(ctx: CheckContext, ids: list[int]) -> str | None:
    """How the job's GPUs are joined when some pair lacks NVLink ("over PCIe only", "across a SYS path ..."), else
    None."""
    slow = [(a, b) for n, a in enumerate(ids) for b in ids[n + 1 :] if ctx.topo.link(a, b).kind != "NV"]
    if not slow:
        return None
    kind = ctx.topo.link(*slow[0]).kind
    pairs = len(ids) * (len(ids) - 1) // 2
    return "over PCIe only" if len(slow) == pairs else f"across a {kind} path (GPUs {slow[0][0]} and {slow[0][1]})"


def _hsdp_shard(ctx: CheckContext, ids: list[int]) -> int | None:
    """GPUs per NVLink island when the job's GPUs split into equal islands of at least two, else None."""
    from generator.topology import islands

    sizes = {len([g for g in i if g in ids]) for i in islands(ctx.topo) if len(i) > 1} - {0}
    if len(sizes) != 1:
        return None
    shard = sizes.pop()
    return shard if 1 < shard < len(ids) and len(ids) % shard == 0 else None


def _faster_alternative(cfg: dict, ctx: CheckContext, ids: list[int], shard: int | None) -> tuple[str, str] | None:
    """(what the estimator predicts, what to use) for its fastest strategy that fits this job without sharding
    parameters over the slow link, when that beats the config's own by more than the planner's tie tolerance."""
    from generator.estimate import applicable, estimate
    from generator.plan.policy import TIE_TOLERANCE
    from generator.topology import order_for_hsdp, subset_busbw_gbps

    name = strategy(cfg)
    base = placement_of(cfg, ctx, len(ids))
    own = estimate(ctx.model, ctx.workload, base, name)
    options = []
    for s in catalog.ALL:
        if s.offload != "none" or s.name == name:
            continue
        where = base
        if s.hybrid:
            if shard is None:
                continue
            block = order_for_hsdp(ctx.topo, ids)[0][:shard]
            where = replace(base, shard_size=shard, shard_busbw_gbps=subset_busbw_gbps(ctx.topo, block))
        elif s.gathers_per_micro_step == 2:
            continue
        if applicable(s.name, ctx.workload, where) is None:
            alt = estimate(ctx.model, ctx.workload, where, s.name)
            if alt.fits:
                options.append(alt)
    best = max(options, key=lambda e: e.tokens_per_s_per_gpu, default=None)
    if best is None or best.tokens_per_s_per_gpu <= (1 + TIE_TOLERANCE) * own.tokens_per_s_per_gpu:
        return None
    gain = best.tokens_per_s_per_gpu / own.tokens_per_s_per_gpu - 1
    how = ""
    if catalog.strategy(best.strategy).hybrid:
        how = (
            f" (FSDP2 with parallelism_config_dp_shard_size {shard}, one NVLink island, and dp_replicate_size "
            f"{len(ids) // shard}, gpu_ids ordered island by island)"
        )
    return (
        f"{best.strategy} fits this job ({best.reserved_gb:.1f} GB reserved per GPU) and is predicted {gain:.0%} "
        f"faster than {name}",
        f"use {best.strategy}{how}",
    )


def sharding_over_pcie(cfg: dict, ctx: CheckContext) -> list[Finding]:
    ids = job_ids(cfg, ctx)
    if ids is None or not sharded(cfg) or catalog.strategy(strategy(cfg)).hybrid:
        return []
    what = _slow_path(ctx, ids)
    if what is None:
        return []
    from generator.topology import islands, subset_busbw_gbps

    shard = _hsdp_shard(ctx, ids)
    problem = f"parameter sharding (FSDP / ZeRO-3) all-gathers every layer {what}: predicted "
    problem += f"{subset_busbw_gbps(ctx.topo, ids):.0f} GB/s bus bandwidth"
    if any(len(i) >= len(ids) for i in islands(ctx.topo) if len(i) > 1):
        fix = "use GPUs of one NVLink island"
    elif ctx.model is not None:
        better = _faster_alternative(cfg, ctx, ids, shard)
        if better is None:
            return []  # the estimator weighed the slow link: nothing that fits here is faster
        problem, fix = f"{problem}; {better[0]}", better[1]
    else:
        fix = "prefer DDP or ZeRO-2 if memory allows (ZeRO-3/FSDP move ~1.5x DDP's bytes per step)"
        if shard and not section(cfg, "parallelism_config"):
            fix += (
                f", or HSDP: FSDP2 with parallelism_config_dp_shard_size {shard} (one NVLink island) and "
                f"dp_replicate_size {len(ids) // shard}, gpu_ids ordered island by island"
            )
        fix += " (pass --model for the estimator's comparison)"
    fix += "; `python -m generator plan` compares them"
    return [Finding("warning", "distributed_type", problem + ".", fix + ".", "sharding_over_pcie")]


RULES = [sharding_over_pcie]
