"""FSDP rules: launch defaults (fsdp_version 1, NO_WRAP), FSDP1 keys under FSDP2, strategy keys in the wrong slot."""

from __future__ import annotations

from generator.catalog.strategies import FSDP1_SHARDING
from generator.check import known_keys as K
from generator.check.types import DELETE, CheckContext, Finding
from generator.check.view import as_bool, as_int, distributed_type, num_machines, per_node_processes, section

S = "fsdp_config"
# FSDP1 sharding strategy -> FSDP2 reshard_after_forward (HYBRID loses its replication: see hsdp rules).
RESHARD = {name: mode[0] for name, mode in FSDP1_SHARDING.items() if mode is not None}


def _fsdp(cfg: dict) -> dict | None:
    return section(cfg, S) if distributed_type(cfg) == "FSDP" else None


def fsdp_version(cfg: dict, ctx: CheckContext) -> list[Finding]:
    fsdp = _fsdp(cfg)
    if fsdp is None:
        return []
    if "fsdp_version" not in fsdp:
        # FSDP1's keys all have an FSDP2 meaning (HYBRID_* included: parallelism_config), so --fix moves to version 2
        return [
            Finding(
                "warning",
                f"{S}.fsdp_version",
                "missing: accelerate launch then runs FSDP1 (its default is 1, the wizard's is 2).",
                "write fsdp_version: 2 explicitly (FSDP2 is what accelerate's wizard now writes; --fix maps the FSDP1 "
                "keys to their FSDP2 meaning), or fsdp_version: 1 to keep FSDP1.",
                "fsdp_version",
                (((S, "fsdp_version"), 2),),
            )
        ]
    if as_int(fsdp["fsdp_version"]) not in (1, 2):
        return [
            Finding(
                "error",
                f"{S}.fsdp_version",
                f"{fsdp['fsdp_version']!r} is not 1 or 2.",
                "use fsdp_version: 2.",
                "fsdp_version",
                (((S, "fsdp_version"), 2),),
            )
        ]
    return []


def fsdp1_keys_under_fsdp2(cfg: dict, ctx: CheckContext) -> list[Finding]:
    fsdp = _fsdp(cfg)
    if fsdp is None or as_int(fsdp.get("fsdp_version")) != 2:
        return []
    out = []
    for key, advice in K.FSDP1_ONLY.items():
        if key not in fsdp:
            continue
        patch: tuple = (((S, key), DELETE),)
        severity = "warning"
        if key == "fsdp_sharding_strategy":
            advice, patch = _sharding_strategy(cfg, str(fsdp[key]).upper(), patch)
        if key == "fsdp_sync_module_states" and as_bool(fsdp[key], True) is False:
            severity = "error" if as_bool(fsdp.get("fsdp_cpu_ram_efficient_loading"), True) else severity
        out.append(
            Finding(
                severity,
                f"{S}.{key}",
                "FSDP1 key: FSDP2 (fsdp_version: 2) ignores it"
                + (" and launch still rejects it with cpu_ram_efficient_loading on." if severity == "error" else "."),
                advice + ".",
                "fsdp1_keys_under_fsdp2",
                patch,
            )
        )
    return out


def _sharding_strategy(cfg: dict, strat: str, patch: tuple) -> tuple[str, tuple]:
    """(advice, patch) moving an FSDP1 sharding strategy to FSDP2: reshard_after_forward, and for HYBRID_* across
    machines the parallelism_config mesh FSDP1 built implicitly (shard inside a machine, replicate across machines)."""
    fsdp = section(cfg, S)
    mode = FSDP1_SHARDING.get(strat, (True, False))
    if mode is None:
        return "NO_SHARD is plain data parallel: use distributed_type: MULTI_GPU", ()
    reshard, hybrid = mode
    advice = f"{strat} is fsdp_reshard_after_forward: {str(reshard).lower()} under FSDP2"
    if "fsdp_reshard_after_forward" not in fsdp:
        patch += (((S, "fsdp_reshard_after_forward"), reshard),)
    if not hybrid:
        return advice, patch
    machines, per_node = num_machines(cfg), per_node_processes(cfg)
    if machines == 1 or per_node is None:
        advice += (
            " (FSDP1's hybrid group is the whole machine, so on one machine it was plain sharding; for NVLink-island "
            "shard groups add parallelism_config_dp_shard_size / parallelism_config_dp_replicate_size)"
        )
        return advice, patch
    if section(cfg, "parallelism_config"):
        return advice + ", with the hybrid mesh in the existing parallelism_config", patch
    advice += (
        f", and its hybrid mesh is parallelism_config_dp_shard_size {per_node} (each machine) x "
        f"parallelism_config_dp_replicate_size {machines} (across machines)"
    )
    mesh = {"dp_replicate": machines, "dp_shard": per_node, "tp": 1, "cp": 1}
    patch += tuple((("parallelism_config", f"parallelism_config_{k}_size"), v) for k, v in mesh.items())
    return advice, patch


def reshard_after_forward(cfg: dict, ctx: CheckContext) -> list[Finding]:
    fsdp = _fsdp(cfg)
    if fsdp is None or "fsdp_reshard_after_forward" not in fsdp:
        return []
    value, key = fsdp["fsdp_reshard_after_forward"], f"{S}.fsdp_reshard_after_forward"
    strat = str(value).upper()
    if as_int(fsdp.get("fsdp_version", 1)) == 1:
        if strat in RESHARD or strat in K.FSDP_SHARDING:
            patch: tuple = (((S, "fsdp_reshard_after_forward"), DELETE),)
            if "fsdp_sharding_strategy" not in fsdp:
                patch += (((S, "fsdp_sharding_strategy"), strat),)
            return [
                Finding(
                    "warning",
                    key,
                    f"FSDP1 ignores a strategy name here ({value!r}); launch exports "
                    "FSDP_SHARDING_STRATEGY (default FULL_SHARD) and the plugin prefers it.",
                    f"write fsdp_sharding_strategy: {strat} instead.",
                    "reshard_after_forward",
                    patch,
                )
            ]
        return []
    if as_bool(value, True) is None:
        fixed = RESHARD.get(strat)
        return [
            Finding(
                "error",
                key,
                f"{value!r} is not true/false; the FSDP2 plugin raises 'invalid truth value'.",
                "use true (full shard, ZeRO-3-like) or false (ZeRO-2-like).",
                "reshard_after_forward",
                (((S, "fsdp_reshard_after_forward"), fixed),) if fixed is not None else (),
            )
        ]
    return []


def wrap_policy(cfg: dict, ctx: CheckContext) -> list[Finding]:
    fsdp = _fsdp(cfg)
    if fsdp is None:
        return []
    policy, key = fsdp.get("fsdp_auto_wrap_policy"), f"{S}.fsdp_auto_wrap_policy"
    patch: tuple = (((S, "fsdp_auto_wrap_policy"), "TRANSFORMER_BASED_WRAP"),)
    if ctx.model is not None and "fsdp_transformer_layer_cls_to_wrap" not in fsdp:
        patch += (((S, "fsdp_transformer_layer_cls_to_wrap"), ctx.model.decoder_layer_cls),)
    fix = "use fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP (one FSDP unit per decoder layer)."
    if policy is None:
        return [
            Finding(
                "warning",
                key,
                "missing: launch falls back to NO_WRAP, one FSDP unit for the whole model "
                "(the full model is gathered at once).",
                fix,
                "wrap_policy",
                patch,
            )
        ]
    if str(policy).upper() == "NO_WRAP":
        return [
            Finding(
                "warning",
                key,
                "NO_WRAP makes the whole model one FSDP unit, so every GPU holds the full "
                "unsharded model during forward and backward.",
                fix,
                "wrap_policy",
                patch,
            )
        ]
    if str(policy).upper() not in K.WRAP_POLICIES:
        return [
            Finding(
                "error",
                key,
                f"{policy!r} is not a wrap policy; the plugin raises ValueError.",
                fix,
                "wrap_policy",
                patch,
            )
        ]
    return []


def fsdp_flag_conflicts(cfg: dict, ctx: CheckContext) -> list[Finding]:
    fsdp = _fsdp(cfg)
    if fsdp is None:
        return []
    out = []
    version = as_int(fsdp.get("fsdp_version", 1))
    loading = as_bool(fsdp.get("fsdp_cpu_ram_efficient_loading"), True)
    sync = as_bool(fsdp.get("fsdp_sync_module_states"), True)
    if version == 1 and loading and sync is False:
        out.append(
            Finding(
                "error",
                f"{S}.fsdp_sync_module_states",
                "false while fsdp_cpu_ram_efficient_loading is on (its launch default): launch raises ValueError.",
                "set fsdp_sync_module_states: true.",
                "fsdp_flag_conflicts",
                (((S, "fsdp_sync_module_states"), True),),
            )
        )
    state = str(fsdp.get("fsdp_state_dict_type", "")).upper()
    if version == 2 and state == "LOCAL_STATE_DICT":
        out.append(
            Finding(
                "error",
                f"{S}.fsdp_state_dict_type",
                "LOCAL_STATE_DICT does not exist under FSDP2 (ValueError).",
                "use SHARDED_STATE_DICT.",
                "fsdp_flag_conflicts",
                (((S, "fsdp_state_dict_type"), "SHARDED_STATE_DICT"),),
            )
        )
    if version == 1 and as_bool(fsdp.get("fsdp_activation_checkpointing_offload"), False):
        out.append(
            Finding(
                "error",
                f"{S}.fsdp_activation_checkpointing_offload",
                "FSDP1 rejects it (ValueError).",
                "remove it or move to fsdp_version: 2.",
                "fsdp_flag_conflicts",
                (((S, "fsdp_activation_checkpointing_offload"), DELETE),),
            )
        )
    if version == 1 and section(cfg, "parallelism_config"):
        out.append(
            Finding(
                "warning",
                "parallelism_config",
                "FSDP1 ignores the device mesh, so no HSDP grouping happens.",
                "use fsdp_version: 2 with parallelism_config, or drop parallelism_config.",
                "fsdp_flag_conflicts",
            )
        )
    return out


RULES = [fsdp_version, fsdp1_keys_under_fsdp2, reshard_after_forward, wrap_policy, fsdp_flag_conflicts]
