"""Tensor / context / sequence parallel keys of `parallelism_config` (accelerate 1.15, parallelism_config.py).

What accelerate does with them: launch exports `PARALLELISM_CONFIG_*` (utils/launch.py, cp_comm_strategy only when
cp_size > 1, the sp_* extras only when sp_size > 1); `ParallelismConfig()` refuses cp with sp, tp/cp over pure
replication, a cp_backend other than torch; `Accelerator()` refuses a product of sizes other than num_processes and,
under FSDP2, a mesh with nothing to shard across (dp_shard = cp = 1). The mesh order is dp_replicate, dp_shard, cp,
sp, tp: a TP group is tp consecutive entries of gpu_ids, a CP group cp entries tp apart.
"""

from __future__ import annotations

from generator.check.types import CheckContext, Finding
from generator.check.view import as_int, distributed_type, fsdp_version, gpu_ids, num_processes, section

P = "parallelism_config_"
RULE = "parallel"


def sizes(cfg: dict) -> dict[str, int]:
    """dp_replicate, dp_shard, tp, cp, sp as written (1 where absent or unreadable)."""
    par = section(cfg, "parallelism_config")
    return {k: as_int(par.get(f"{P}{k}_size", 1)) or 1 for k in ("dp_replicate", "dp_shard", "tp", "cp", "sp")}


def model_parallel(cfg: dict) -> bool:
    """True when the config asks for tensor, context or sequence parallelism."""
    s = sizes(cfg)
    return s["tp"] > 1 or s["cp"] > 1 or s["sp"] > 1


def _f(severity: str, key: str, problem: str, fix: str) -> Finding:
    return Finding(severity, f"parallelism_config.{key}" if key else "parallelism_config", problem, fix, RULE)


def parallel_sizes(cfg: dict, ctx: CheckContext) -> list[Finding]:
    """Sizes accelerate refuses at Accelerator(), and combinations ParallelismConfig() rejects."""
    if not model_parallel(cfg):
        return []
    s, out = sizes(cfg), []
    total = s["dp_replicate"] * s["dp_shard"] * s["tp"] * s["cp"] * s["sp"]
    procs = num_processes(cfg)
    if procs and total != procs and s["sp"] == 1:  # DeepSpeed SP skips the check (its groups are global)
        out.append(
            _f(
                "error",
                "",
                f"dp_replicate x dp_shard x tp x cp = {total}, but num_processes is {procs}: Accelerator() raises.",
                f"choose sizes whose product is {procs}.",
            )
        )
    if s["cp"] > 1 and s["sp"] > 1:
        out.append(
            _f(
                "error",
                f"{P}sp_size",
                "context and sequence parallel are mutually exclusive.",
                "keep one of cp_size and sp_size above 1.",
            )
        )
    if (s["tp"] > 1 or s["cp"] > 1) and s["dp_replicate"] > 1 and s["dp_shard"] == 1:
        out.append(
            _f(
                "error",
                f"{P}dp_shard_size",
                "tp/cp over pure replication (dp_shard_size 1) is refused.",
                "shard instead: move the replicas into dp_shard_size.",
            )
        )
    fsdp2 = distributed_type(cfg) == "FSDP" and fsdp_version(cfg) == 2
    if fsdp2 and s["dp_shard"] == 1 and s["cp"] == 1:
        out.append(
            _f(
                "error",
                f"{P}dp_shard_size",
                "under FSDP2, dp_shard_size and cp_size both 1 leave FSDP "
                "nothing to shard across: Accelerator() raises.",
                "lower tp_size so dp_shard_size can be 2+.",
            )
        )
    backend = section(cfg, "parallelism_config").get(f"{P}cp_backend", "torch")
    if backend != "torch":
        out.append(
            _f(
                "error",
                f"{P}cp_backend",
                f"{backend!r} is not a context-parallel backend accelerate 1.15 knows.",
                "use torch.",
            )
        )
    return out


def parallel_needs_fsdp2(cfg: dict, ctx: CheckContext) -> list[Finding]:
    """CP and TP run over FSDP2 here (torch context_parallel needs FSDP2's DTensor mesh); SP is DeepSpeed's."""
    s, dist, out = sizes(cfg), distributed_type(cfg), []
    fsdp2 = dist == "FSDP" and fsdp_version(cfg) == 2
    if s["cp"] > 1 and not fsdp2:
        out.append(
            _f(
                "error",
                f"{P}cp_size",
                f"context parallel needs FSDP2; this config is {dist}"
                + (" with fsdp_version 1" if dist == "FSDP" else "")
                + ".",
                "use distributed_type: FSDP with fsdp_version: 2.",
            )
        )
    if s["tp"] > 1 and not fsdp2 and dist != "MULTI_GPU":
        out.append(
            _f(
                "warning",
                f"{P}tp_size",
                f"tensor parallel under {dist} is not what this tool plans (FSDP2 + transformers tp_plan).",
                "use distributed_type: FSDP with fsdp_version: 2.",
            )
        )
    if s["sp"] > 1 and dist != "DEEPSPEED":
        out.append(
            _f(
                "error",
                f"{P}sp_size",
                "sequence parallel (sp_backend deepspeed, Ulysses) needs DeepSpeed.",
                "use distributed_type: DEEPSPEED, or context parallel (cp_size) under FSDP2.",
            )
        )
    return out


IGNORED_UNLESS = {
    f"{P}cp_comm_strategy": "cp",
    f"{P}sp_seq_length": "sp",
    f"{P}sp_seq_length_is_variable": "sp",
    f"{P}sp_attn_implementation": "sp",
}
"""Keys accelerate's launcher exports only when that size is above 1 (utils/launch.py)."""


def parallel_ignored_keys(cfg: dict, ctx: CheckContext) -> list[Finding]:
    par, s, out = section(cfg, "parallelism_config"), sizes(cfg), []
    for key, dim in IGNORED_UNLESS.items():
        if key in par and s[dim] == 1:
            out.append(
                _f(
                    "warning",
                    key,
                    f"ignored: launch exports it only when {dim}_size > 1.",
                    "drop it, or set the size it belongs to.",
                )
            )
    return out


def parallel_islands(cfg: dict, ctx: CheckContext) -> list[Finding]:
    """TP and CP groups (from gpu_ids in rank order) that leave one NVLink island: every layer waits on that link."""
    if ctx.topo is None or not model_parallel(cfg):
        return []
    from generator.topology.islands import islands

    ids, s = gpu_ids(cfg), sizes(cfg)
    if not isinstance(ids, list) or not set(ids) <= set(ctx.topo.indices):
        return []
    owner = {g: i for i, isl in enumerate(islands(ctx.topo)) for g in isl if len(isl) > 1}
    tp, cp, out = s["tp"], s["cp"], []
    for name, size, groups in (
        ("tp", tp, [ids[i : i + tp] for i in range(0, len(ids) - tp + 1, tp)]),
        ("cp", cp, [[b[t + i * tp] for i in range(cp)] for b in _blocks(ids, tp * cp) for t in range(tp)]),
    ):
        bad = [g for g in groups if size > 1 and len({owner.get(x, -1 - x) for x in g}) > 1]
        if bad:
            g = ",".join(map(str, bad[0]))
            out.append(
                _f(
                    "warning",
                    f"{P}{name}_size",
                    f"the {name.upper()} group GPUs {g} spans NVLink islands: "
                    f"{WHAT[name]}"
                    " at every layer over the slower link.",
                    "order gpu_ids so each group is inside one island, or use a size that fits in one "
                    "(python -m generator plan chooses both).",
                )
            )
    return out


WHAT = {"tp": "tensor parallel all-reduces", "cp": "context parallel passes keys and values"}


def _blocks(ids: list[int], n: int) -> list[list[int]]:
    return [ids[i : i + n] for i in range(0, len(ids) - n + 1, n)] if n > 0 else []


def parallel_memory(cfg: dict, ctx: CheckContext) -> list[Finding]:
    """The memory rule for TP/CP configs (the plain one skips them): estimate.parallel at the given sizes."""
    s = sizes(cfg)
    if ctx.model is None or ctx.topo is None or not (s["tp"] > 1 or s["cp"] > 1) or s["sp"] > 1:
        return []
    procs = num_processes(cfg) or 0
    local = len(gpu_ids(cfg)) if isinstance(gpu_ids(cfg), list) else procs
    if not procs or s["dp_replicate"] * s["dp_shard"] * s["tp"] * s["cp"] != procs or local > len(ctx.topo.gpus):
        return []
    from dataclasses import replace

    from generator.check.rules_memory import placement_of
    from generator.estimate.parallel import Layout, estimate_layout

    placement = placement_of(cfg, ctx, local)
    bw = placement.busbw_gbps
    lay = Layout(
        tp=s["tp"],
        cp=s["cp"],
        dp_shard=s["dp_shard"],
        dp_replicate=s["dp_replicate"],
        tp_busbw_gbps=bw,
        cp_busbw_gbps=bw,
        fsdp_busbw_gbps=bw,
    )
    est = estimate_layout(ctx.model, replace(ctx.workload, attention="sdpa"), placement, lay)
    if est.fits:
        return []
    w = ctx.workload
    return [
        _f(
            "error",
            "",
            f"{lay.label} predicted at {est.reserved_gb:.1f} GB reserved per GPU > "
            f"{est.capacity_gb:.1f} GB usable ({ctx.model.name}, {w.method}, seq {w.seq_len}, micro-batch "
            f"{w.micro_batch}; predicted).",
            "raise cp_size or tp_size inside an island, or lower the "
            "sequence length (python -m generator plan --seq-len N suggests one that fits).",
        )
    ]


RULES = [parallel_sizes, parallel_needs_fsdp2, parallel_ignored_keys, parallel_islands, parallel_memory]
