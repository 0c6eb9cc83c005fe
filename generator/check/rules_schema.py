"""Top-level schema rules: keys accelerate 1.15 rejects, ignores or mis-reads (YAML 1.1 booleans, bad enum strings)."""

from __future__ import annotations

import difflib

from generator.check import known_keys as K
from generator.check.types import DELETE, CheckContext, Finding
from generator.check.view import as_int, distributed_type, num_machines


def _close(word: str, choices) -> str | None:
    match = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.75)
    return match[0] if match else None


def unknown_top_level_keys(cfg: dict, ctx: CheckContext) -> list[Finding]:
    out = []
    for key in cfg:
        name = str(key)
        if name in K.TOP_LEVEL or name in K.DEPRECATED_TOP_LEVEL:
            continue
        name = name if name.strip() else repr(name)
        guess = _close(name, K.TOP_LEVEL)
        if guess and guess not in cfg:
            fix, patch = f"rename it to {guess!r}.", (((key,), DELETE), ((guess,), cfg[key]))
        else:
            fix, patch = "remove it.", (((key,), DELETE),)
        problem = "unknown top-level key: accelerate launch stops with 'unknown keys' before starting."
        out.append(Finding("error", name, problem, fix, "unknown_top_level_keys", patch))
    return out


def deprecated_top_level_keys(cfg: dict, ctx: CheckContext) -> list[Finding]:
    out = []
    if "fp16" in cfg:
        patch: tuple = (((("fp16",), DELETE)),)
        if cfg["fp16"] is True and "mixed_precision" not in cfg:
            patch += ((("mixed_precision",), "fp16"),)
        out.append(
            Finding(
                "warning",
                "fp16",
                "legacy key, converted on load; current accelerate writes mixed_precision instead.",
                "use mixed_precision: 'fp16' (bf16 on Ampere or newer).",
                "deprecated_top_level_keys",
                patch,
            )
        )
    if "dynamo_backend" in cfg:
        value = cfg["dynamo_backend"]
        patch = ((("dynamo_backend",), DELETE),)
        if "dynamo_config" not in cfg and isinstance(value, str) and value.upper() != "NO":
            patch += ((("dynamo_config",), {"dynamo_backend": value}),)
        out.append(
            Finding(
                "warning",
                "dynamo_backend",
                "legacy top-level key, converted on load.",
                "move it into dynamo_config: {dynamo_backend: ...}.",
                "deprecated_top_level_keys",
                patch,
            )
        )
    return out


def ignored_scalars(cfg: dict, ctx: CheckContext) -> list[Finding]:
    out = []
    for key, cli_default in K.IGNORED_SCALARS.items():
        if key not in cfg:
            continue
        value = cfg[key]
        flag = f"--{key}" + (f" {value}" if key == "rdzv_backend" else "")
        multi_node_only = key in ("rdzv_backend", "same_network") and num_machines(cfg) <= 1
        if value == cli_default or value is None or multi_node_only:
            why = "on one machine it is unused" if multi_node_only else "it matches that default anyway"

            out.append(
                Finding(
                    "info",
                    key,
                    f"has no effect in the YAML (launch's CLI default {cli_default!r} always wins), and {why}.",
                    "remove it.",
                    "ignored_scalars",
                    (((key,), DELETE),),
                )
            )
        else:
            out.append(
                Finding(
                    "warning",
                    key,
                    f"accelerate launch ignores the YAML value {value!r}: the CLI default {cli_default!r} always wins.",
                    f"pass {flag} on the accelerate launch command line.",
                    "ignored_scalars",
                    (((key,), DELETE),),
                )
            )
    return out


# key -> (what `False` meant to say, what a boolean there does, the fix)
_BOOLEAN_KEYS = {
    "distributed_type": (
        "NO",
        "(unquoted NO/no/off/yes in YAML 1.1); accelerate accepts it without checking and never picks a launcher for "
        "it.",
        ("write distributed_type: 'NO' (quoted).", "write a quoted distributed type."),
    ),
    "mixed_precision": (
        "no",
        "(unquoted no/off/yes); launch crashes with \"'bool' object has no attribute 'lower'\".",
        ("write mixed_precision: 'no' (quoted), or 'bf16'.",) * 2,
    ),
}


def yaml_booleans(cfg: dict, ctx: CheckContext) -> list[Finding]:
    """Unquoted NO / no / off load as False under YAML 1.1, which accelerate uses."""
    out = []
    for key, (false_means, consequence, (fix_false, fix_true)) in _BOOLEAN_KEYS.items():
        value = cfg.get(key)
        if not isinstance(value, bool):
            continue
        fixed = false_means if value is False else None
        out.append(
            Finding(
                "error",
                key,
                f"loaded as the boolean {value} {consequence}",
                fix_false if fixed else fix_true,
                "yaml_booleans",
                ((((key,), fixed),) if fixed else ()),
            )
        )
    return out


def enum_values(cfg: dict, ctx: CheckContext) -> list[Finding]:
    out = []
    if "distributed_type" not in cfg:
        out.append(
            Finding(
                "error",
                "distributed_type",
                "missing; accelerate refuses the file without it.",
                "add distributed_type: MULTI_GPU (DDP), FSDP, DEEPSPEED or 'NO'.",
                "enum_values",
            )
        )
    kind, raw = distributed_type(cfg), cfg.get("distributed_type")
    if isinstance(raw, str) and raw not in K.DISTRIBUTED_TYPES:
        guess = K.DISTRIBUTED_ALIASES.get(kind or "") or (kind if kind in K.DISTRIBUTED_TYPES else None)
        guess = guess or _close(kind or "", K.DISTRIBUTED_TYPES)
        out.append(
            Finding(
                "error",
                "distributed_type",
                f"{raw!r} is not a DistributedType; launch raises ValueError.",
                f"use {guess!r}." if guess else f"use one of {', '.join(K.DISTRIBUTED_TYPES[:4])}.",
                "enum_values",
                (((("distributed_type",), guess),) if guess else ()),
            )
        )
    elif raw is not None and not isinstance(raw, (str, bool)):
        out.append(
            Finding(
                "error",
                "distributed_type",
                f"{raw!r} is not a string.",
                "use MULTI_GPU, FSDP, DEEPSPEED or 'NO'.",
                "enum_values",
            )
        )
    mp = cfg.get("mixed_precision")
    if mp is not None and not isinstance(mp, bool) and str(mp).lower() not in K.MIXED_PRECISION:
        fixed = "no" if str(mp).lower() in ("fp32", "none", "float32") else "bf16" if "bf" in str(mp).lower() else None
        out.append(
            Finding(
                "error",
                "mixed_precision",
                f"{mp!r} is not a precision accelerate knows; launch fails.",
                f"use one of {', '.join(K.MIXED_PRECISION)}.",
                "enum_values",
                (((("mixed_precision",), fixed),) if fixed else ()),
            )
        )
    env = cfg.get("compute_environment")
    if env is not None and env not in K.COMPUTE_ENVIRONMENTS:
        out.append(
            Finding(
                "error",
                "compute_environment",
                f"{env!r} is not LOCAL_MACHINE or AMAZON_SAGEMAKER.",
                "use LOCAL_MACHINE.",
                "enum_values",
                ((("compute_environment",), "LOCAL_MACHINE"),),
            )
        )
    return out


def process_counts(cfg: dict, ctx: CheckContext) -> list[Finding]:
    out = []
    kind = distributed_type(cfg)
    n, machines = cfg.get("num_processes"), cfg.get("num_machines", 1)
    if kind not in (None, "NO") and (as_int(n) is None or as_int(n) < 1):
        out.append(
            Finding(
                "error",
                "num_processes",
                f"{n!r}: launch needs a positive total process count (-1 or missing makes it stop).",
                "set num_processes to the total GPU count over all machines.",
                "process_counts",
            )
        )
    if as_int(machines) is None or as_int(machines) < 1:
        out.append(
            Finding(
                "error",
                "num_machines",
                f"{machines!r} is not a positive integer.",
                "set num_machines: 1 for one node.",
                "process_counts",
                ((("num_machines",), 1),),
            )
        )
    elif as_int(n) and as_int(n) > 0 and as_int(n) % as_int(machines):
        out.append(
            Finding(
                "error",
                "num_processes",
                f"{n} processes do not divide over {machines} machines (num_processes is the total over all machines).",
                "make num_processes = GPUs per machine x num_machines.",
                "process_counts",
            )
        )
    if kind == "NO" and (as_int(n) or 1) > 1:
        out.append(
            Finding(
                "warning",
                "num_processes",
                f"distributed_type 'NO' runs one process; {n} is ignored.",
                "use MULTI_GPU for data parallel, or set num_processes: 1.",
                "process_counts",
                ((("num_processes",), 1),),
            )
        )
    return out


def duplicate_keys(cfg: dict, ctx: CheckContext) -> list[Finding]:
    return [
        Finding(
            "warning", key, "appears more than once; YAML silently keeps the last value.", "keep one.", "duplicate_keys"
        )
        for key in sorted(set(ctx.duplicate_keys))
    ]


RULES = [
    unknown_top_level_keys,
    deprecated_top_level_keys,
    ignored_scalars,
    yaml_booleans,
    enum_values,
    process_counts,
    duplicate_keys,
]
