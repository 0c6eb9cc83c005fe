"""Tolerant readers over a raw config dict: rules may see any YAML value (bools, lists, dates, None) in any slot."""

from __future__ import annotations

from typing import Any

from generator.catalog import strategies as catalog


def section(cfg: dict, name: str) -> dict:
    """The nested mapping `name`, or {} when it is missing or not a mapping (a rule reports the latter)."""
    value = cfg.get(name)
    return value if isinstance(value, dict) else {}


def as_int(value: Any) -> int | None:
    """An int from an int or a digit string ("2"); None for anything else (bools included: True is not 1 here)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def as_bool(value: Any, default: bool) -> bool | None:
    """accelerate's str_to_bool reading of a flag; None when the value is not a truth value at all."""
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("y", "yes", "t", "true", "on", "1"):
        return True
    if text in ("n", "no", "f", "false", "off", "0"):
        return False
    return None


def distributed_type(cfg: dict) -> str | None:
    value = cfg.get("distributed_type")
    return value.strip().upper() if isinstance(value, str) else None


def num_machines(cfg: dict) -> int:
    n = as_int(cfg.get("num_machines", 1))
    return n if n is not None and n > 0 else 1


def num_processes(cfg: dict) -> int | None:
    n = as_int(cfg.get("num_processes"))
    return n if n is not None and n > 0 else None


def per_node_processes(cfg: dict) -> int | None:
    n = num_processes(cfg)
    return None if n is None else max(1, n // num_machines(cfg))


def gpu_ids(cfg: dict) -> list[int] | str | None:
    """Explicit ids in rank order, "all" (also when absent), or None when the value cannot be read as ids."""
    value = cfg.get("gpu_ids", "all")
    if value is None:
        return "all"
    if isinstance(value, str):
        if value.strip().lower() == "all":
            return "all"
        parts = [p.strip() for p in value.split(",")]
        return [int(p) for p in parts] if parts and all(p.isdigit() for p in parts) else None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return [value] if value >= 0 else None
    if isinstance(value, (list, tuple)) and value and all(as_int(v) is not None and as_int(v) >= 0 for v in value):
        return [as_int(v) for v in value]
    return None


def fsdp_version(cfg: dict) -> int:
    """Effective FSDP version: launch's default is 1 when the key is missing."""
    v = as_int(section(cfg, "fsdp_config").get("fsdp_version", 1))
    return v if v in (1, 2) else 1


def zero_stage(cfg: dict) -> int | None:
    ds = section(cfg, "deepspeed_config")
    if ds.get("deepspeed_config_file") not in (None, "none"):
        return None  # the stage lives in the JSON
    return as_int(ds.get("zero_stage", 2))


def strategy(cfg: dict) -> str | None:
    """The catalog's strategy name for this config (generator.catalog.strategies), when it maps to one."""
    kind = distributed_type(cfg)
    if kind in ("NO", "MULTI_GPU"):
        return "ddp"
    if kind == "DEEPSPEED":
        ds = section(cfg, "deepspeed_config")
        offload = str(ds.get("offload_optimizer_device", "none")).lower() not in ("none", "false")
        found = catalog.from_accelerate(kind, zero_stage=zero_stage(cfg), offload=offload)
        return found.name if found else None
    if kind == "FSDP":
        fsdp = section(cfg, "fsdp_config")
        if fsdp_version(cfg) == 1:
            sharding = str(fsdp.get("fsdp_sharding_strategy", "FULL_SHARD")).upper()
            mode = catalog.FSDP1_SHARDING.get(sharding, (True, False))
            # Within one machine FSDP1's hybrid group is the whole machine: plain sharding, as far as memory goes.
            return "ddp" if mode is None else catalog.from_accelerate(kind, reshard=mode[0]).name
        par = section(cfg, "parallelism_config")
        hybrid = (as_int(par.get("parallelism_config_dp_replicate_size", 1)) or 1) > 1
        reshard = as_bool(fsdp.get("fsdp_reshard_after_forward"), True) is not False
        return catalog.from_accelerate(kind, reshard=reshard, hybrid=hybrid).name
    return None


def sharded(cfg: dict) -> bool:
    """True for strategies that all-gather parameters twice every step (FSDP full shard, HSDP, ZeRO-3)."""
    name = strategy(cfg)
    return name is not None and catalog.strategy(name).gathers_per_micro_step == 2
