"""Rules that need this machine's wiring: ids spanning NVLink islands, HSDP groups vs islands (sharding over slow
links: rules_sharding).

The topology engine is imported inside the rules so `check` without a topology never loads it."""

from __future__ import annotations

from generator.check.types import CheckContext, Finding
from generator.check.view import as_int, distributed_type, fsdp_version, gpu_ids, per_node_processes, section
from generator.errors import UserError


def job_ids(cfg: dict, ctx: CheckContext) -> list[int] | None:
    """GPU ids one machine of the job uses, in rank order, when that is knowable and valid on this machine."""
    if ctx.topo is None or distributed_type(cfg) in (None, "NO"):
        return None
    ids, have = gpu_ids(cfg), list(ctx.topo.indices)
    if ids == "all":
        per_node = per_node_processes(cfg)
        return have if per_node == len(have) else None
    if isinstance(ids, list) and len(ids) > 1 and len(set(ids)) == len(ids) and set(ids) <= set(have):
        return ids
    return None


def _spans_islands(topo, ids) -> bool:
    from generator.topology import island_of

    return len({tuple(island_of(topo, g)) for g in ids}) > 1


def islands_spanned(cfg: dict, ctx: CheckContext) -> list[Finding]:
    ids = job_ids(cfg, ctx)
    if ids is None:
        return []
    from generator.topology import best_subset, islands, subset_busbw_gbps

    if not _spans_islands(ctx.topo, ids) or not any(len(i) >= len(ids) for i in islands(ctx.topo)):
        return []
    try:
        best = best_subset(ctx.topo, len(ids), exclude=ctx.exclude)
    except UserError:  # --exclude leaves too few GPUs to suggest another set
        return []
    if _spans_islands(ctx.topo, best.gpu_ids):
        return []  # with the excluded GPUs out, no single island holds the job either
    now, better = subset_busbw_gbps(ctx.topo, ids), best.busbw_gbps
    text = ",".join(map(str, best.gpu_ids))
    return [
        Finding(
            "warning",
            "gpu_ids",
            f"GPUs {','.join(map(str, ids))} span NVLink islands (predicted "
            f"{now:.0f} GB/s bus bandwidth) although one island holds {len(ids)} GPUs.",
            f"use gpu_ids: {text} (predicted {better:.0f} GB/s).",
            "islands_spanned",
            ((("gpu_ids",), text),) if as_int(cfg.get("num_machines", 1)) in (None, 1) else (),
        )
    ]


def hsdp_groups(cfg: dict, ctx: CheckContext) -> list[Finding]:
    ids = job_ids(cfg, ctx)
    if ids is None or distributed_type(cfg) != "FSDP":
        return []
    from generator.topology import order_for_hsdp

    fsdp = section(cfg, "fsdp_config")
    if fsdp_version(cfg) == 1:
        if str(fsdp.get("fsdp_sharding_strategy", "")).upper().startswith("HYBRID") and cfg.get("num_machines", 1) in (
            1,
            None,
        ):
            return [
                Finding(
                    "warning",
                    "fsdp_config.fsdp_sharding_strategy",
                    "FSDP1 HYBRID_SHARD shards over all "
                    "visible GPUs of a machine, so on one machine it is plain FULL_SHARD (no island groups).",
                    "for island-sized shard groups use fsdp_version: 2 with parallelism_config.",
                    "hsdp_groups",
                )
            ]
        return []
    par = section(cfg, "parallelism_config")
    shard = as_int(par.get("parallelism_config_dp_shard_size"))
    replicate = as_int(par.get("parallelism_config_dp_replicate_size", 1)) or 1
    if not shard or replicate < 2 or len(ids) % shard:
        return []
    blocks = [ids[i : i + shard] for i in range(0, len(ids), shard)]
    bad = [b for b in blocks if _spans_islands(ctx.topo, b)]
    if not bad:
        return []
    ordered, best_shard = order_for_hsdp(ctx.topo, ids)
    text = ",".join(map(str, ordered))
    patch: tuple = ((("gpu_ids",), text),)
    if best_shard != shard and len(ids) % best_shard == 0:
        patch += (
            (("parallelism_config", "parallelism_config_dp_shard_size"), best_shard),
            (("parallelism_config", "parallelism_config_dp_replicate_size"), len(ids) // best_shard),
        )
    return [
        Finding(
            "warning",
            "parallelism_config.parallelism_config_dp_shard_size",
            f"shard group "
            f"{','.join(map(str, bad[0]))} (ranks in gpu_ids order, {shard} per group) spans NVLink islands, "
            "so every parameter all-gather crosses the slow link.",
            f"use gpu_ids: {text} with dp_shard_size {best_shard} (each island a contiguous block).",
            "hsdp_groups",
            patch,
        )
    ]


def fsdp1_hybrid_visible(cfg: dict, ctx: CheckContext) -> list[Finding]:
    """FSDP1 HYBRID_SHARD builds its shard group from torch.cuda.device_count(): more visible GPUs than processes
    per machine fails ("group_size must not exceed the world size")."""
    strat = str(section(cfg, "fsdp_config").get("fsdp_sharding_strategy", "")).upper()
    if ctx.topo is None or distributed_type(cfg) != "FSDP" or fsdp_version(cfg) != 1 or not strat.startswith("HYBRID"):
        return []
    per_node, visible = per_node_processes(cfg), gpu_ids(cfg)
    count = len(ctx.topo.gpus) if visible == "all" else len(visible) if isinstance(visible, list) else None
    if per_node is None or count is None or count <= per_node:
        return []
    return [
        Finding(
            "error",
            "gpu_ids",
            f"FSDP1 HYBRID_SHARD sizes its shard group by the visible GPUs ({count}), more than the {per_node} "
            "processes per machine: torch raises 'group_size must not exceed the world size'.",
            f"list exactly {per_node} GPUs in gpu_ids.",
            "fsdp1_hybrid_visible",
        )
    ]


def hsdp_sizes(cfg: dict, ctx: CheckContext) -> list[Finding]:
    par = section(cfg, "parallelism_config")
    if distributed_type(cfg) != "FSDP" or not par:
        return []
    sizes = {k: as_int(par.get(f"parallelism_config_{k}_size", 1)) for k in ("dp_replicate", "dp_shard", "tp", "cp")}
    sizes["sp"] = as_int(par.get("parallelism_config_sp_size", 1))
    if any(v is None or v < 1 for v in sizes.values()):
        return [
            Finding(
                "error",
                "parallelism_config",
                "sizes must be positive integers.",
                "fix the *_size values.",
                "hsdp_sizes",
            )
        ]
    out, total, n = [], 1, as_int(cfg.get("num_processes"))
    for v in sizes.values():
        total *= v
    if n and total != n:
        out.append(
            Finding(
                "error",
                "parallelism_config",
                f"replicate x shard x tp x cp x sp = {total}, but num_processes is {n}; Accelerator() raises.",
                "make the product equal num_processes.",
                "hsdp_sizes",
            )
        )
    if sizes["dp_shard"] == 1 and sizes["cp"] == 1 and fsdp_version(cfg) == 2:
        out.append(
            Finding(
                "error",
                "parallelism_config.parallelism_config_dp_shard_size",
                "1 with cp_size 1: FSDP2 has no dimension to shard across (error in accelerate 1.15).",
                "set dp_shard_size to the GPUs per NVLink island, or use MULTI_GPU for pure replication.",
                "hsdp_sizes",
            )
        )
    return out


RULES = [islands_spanned, hsdp_groups, fsdp1_hybrid_visible, hsdp_sizes]
