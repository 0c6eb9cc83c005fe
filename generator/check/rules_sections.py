"""Nested sections (fsdp_config, deepspeed_config, ...): accelerate copies their keys onto launch args without checking,
so a typo or a key meant for another place is silently dropped."""

from __future__ import annotations

import difflib

from generator.check import known_keys as K
from generator.check.types import DELETE, CheckContext, Finding

# Keys people put under deepspeed_config that belong in a DeepSpeed JSON (accelerate ignores them in the YAML).
DS_JSON_KEYS = (
    "zero_hpz_partition_size",
    "zero_quantized_weights",
    "zero_quantized_gradients",
    "train_micro_batch_size_per_gpu",
    "train_batch_size",
    "zero_optimization",
    "bf16",
    "fp16",
    "overlap_comm",
    "contiguous_gradients",
    "reduce_bucket_size",
    "stage3_prefetch_bucket_size",
)


def section_types(cfg: dict, ctx: CheckContext) -> list[Finding]:
    out = []
    for name in (*K.SECTIONS, "megatron_lm_config", "mpirun_config"):
        value = cfg.get(name)
        if value is not None and not isinstance(value, dict):
            out.append(
                Finding(
                    "error",
                    name,
                    f"is a {type(value).__name__}, expected a mapping of keys.",
                    f"write {name}: as a block of 'key: value' lines (or remove it).",
                    "section_types",
                    (((name,), DELETE),) if value in ("", [], False) else (),
                )
            )
    return out


def _fsdp2_after_fix(fsdp: dict) -> bool:
    """FSDP2 is what runs: fsdp_version 2, or missing (the fsdp_version rule's fix writes 2)."""
    return str(fsdp.get("fsdp_version", 2)).strip() == "2"


def unknown_section_keys(cfg: dict, ctx: CheckContext) -> list[Finding]:
    out = []
    for name, (known, prefix) in K.SECTIONS.items():
        sec = cfg.get(name)
        if not isinstance(sec, dict):
            continue
        for key in sec:
            raw = str(key)
            effective = raw if not prefix or raw.startswith(prefix.rstrip("_")) else prefix + raw
            if effective in known:
                continue
            path = f"{name}.{raw if raw.strip() else repr(raw)}"
            if name == "parallelism_config" and "parallelism_config_" + raw in known:
                target = "parallelism_config_" + raw
                out.append(
                    Finding(
                        "error",
                        path,
                        "unprefixed key is silently ignored (sizes stay 1), so the mesh is "
                        "not what you wrote and the job fails at runtime.",
                        f"rename it to {target}.",
                        "unknown_section_keys",
                        (((name, key), DELETE), ((name, target), sec[key])),
                    )
                )
                continue
            if name == "deepspeed_config" and raw in DS_JSON_KEYS:
                out.append(
                    Finding(
                        "warning",
                        path,
                        "DeepSpeed JSON setting; accelerate ignores it under deepspeed_config.",
                        "put it in a DeepSpeed JSON and point deepspeed_config_file at it.",
                        "unknown_section_keys",
                        (((name, key), DELETE),),
                    )
                )
                continue
            guess = difflib.get_close_matches(effective, sorted(known), n=1, cutoff=0.8)
            if guess and guess[0] in K.FSDP1_ONLY and name == "fsdp_config" and _fsdp2_after_fix(sec):
                # renaming it would only create a key that FSDP2 ignores too (and --fix would then drop it)
                fix, patch = (
                    f"it means {guess[0]}, which FSDP2 ignores: {K.FSDP1_ONLY[guess[0]]}.",
                    (((name, key), DELETE),),
                )
            elif guess and guess[0] not in sec:
                fix, patch = f"rename it to {guess[0]}.", (((name, key), DELETE), ((name, guess[0]), sec[key]))
            else:
                fix, patch = "remove it.", (((name, key), DELETE),)
            out.append(
                Finding(
                    "warning",
                    path,
                    "unknown key: accelerate 1.15 silently ignores it.",
                    fix,
                    "unknown_section_keys",
                    patch,
                )
            )
    return out


RULES = [section_types, unknown_section_keys]
