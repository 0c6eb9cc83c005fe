"""The workload a generator-written config was planned for, read back from its comment header (None for any other
config): `check` then judges memory for that workload instead of its own defaults, under the script being checked."""

from __future__ import annotations

import re
import shlex

from generator.estimate.attention import ATTN_IMPLEMENTATION
from generator.estimate.types import Workload

_WORKLOAD = re.compile(
    r"Workload: (?P<model>\S+), method (?P<method>\w+), sequence length (?P<seq>\d+), "
    r"micro-batch (?P<mb>\d+) x accumulation (?P<ga>\d+)"
)
_SCRIPT = re.compile(r"Script assumed: (?P<script>\S+) \(")
_CKPT = re.compile(r"Activation checkpointing: (?P<ckpt>on|off)")
_LAUNCH = "Launch (from the directory the config path is relative to):"


def header_text(text: str) -> str:
    """The leading comment block as one string: wrapped lines joined back, the launch command on its own line."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].strip())
    return " ".join(lines).replace(_LAUNCH, "\n" + _LAUNCH + "\n")


def written_for(text: str) -> tuple[str, Workload] | None:
    """(model name, workload under the header's script) when `text` starts with the generator's header, else None.
    A header from before the script line (issue 18) was written for train.py."""
    head = header_text(text)
    w = _WORKLOAD.search(head)
    if "Written by dist-config-generator" not in head or w is None:
        return None
    script = _SCRIPT.search(head)
    ckpt = _CKPT.search(head)
    argv = shlex.split(head.split(_LAUNCH, 1)[1]) if _LAUNCH in head else []

    def flag(name: str, default: str) -> str:
        return argv[argv.index(name) + 1] if name in argv[:-1] else default

    from generator.estimate.scripts import FACTS, LOAD_DTYPE_OF, default_load_dtype, parse_lora_targets

    name = script.group("script") if script else "train.py"
    facts = FACTS.get(name, FACTS["train.py"])
    method = w.group("method")
    # TRL's CLI spells its flags with underscores (emit.script_cli); train.py with dashes; a custom loop's launch
    # line has none, and the header's workload line and the script's defaults stand in
    trl = name == "trainer"
    dtype = LOAD_DTYPE_OF.get(flag("--dtype", "")) if trl else None
    targets = _trl_targets(argv) if trl else flag("--lora-targets", "") or _header_targets(head)
    workload = Workload(
        method=method,
        seq_len=int(w.group("seq")),
        micro_batch=int(w.group("mb")),
        grad_accum=int(w.group("ga")),
        grad_checkpointing=ckpt is None or ckpt.group("ckpt") == "on",
        load_dtype=dtype or flag("--load-dtype", default_load_dtype(facts.name, method)),
        lora_r=int(flag("--lora_r" if trl else "--lora-r", "16")),
        lora_targets=parse_lora_targets(targets) if targets else facts.lora_targets,
        lora_dropout=facts.lora_dropout,
        liger=flag("--use_liger_kernel", "False") == "True" if trl else "--liger" in argv,
        attention=_attention(flag("--attn-implementation", "") or flag("--attn_implementation", "")) or
        _header_attention(head),
        script=facts.name,
        precision=flag("--precision", "bf16"),
        grad_as_bucket_view=facts.grad_as_bucket_view,
    )  # fmt: skip
    return w.group("model"), workload


_LORA = re.compile(r"LoraConfig\(r=\d+, target_modules=(?P<targets>'all-linear'|\[[^\]]*\])")


def _header_targets(head: str) -> str:
    """A custom loop's LoRA targets from its settings line (peft LoraConfig(..., target_modules=...)), or ''."""
    found = _LORA.search(head)
    return found.group("targets").strip("[]").replace("'", "").replace(" ", "") if found else ""


def _trl_targets(argv: list[str]) -> str:
    """--lora_target_modules takes one or more words (TRL's HfArgumentParser list field)."""
    if "--lora_target_modules" not in argv:
        return ""
    words = argv[argv.index("--lora_target_modules") + 1 :]
    return ",".join(w for w in _until_flag(words))


def _until_flag(words: list[str]) -> list[str]:
    out = []
    for word in words:
        if word.startswith("--"):
            break
        out.append(word)
    return out


_ATTENTION = re.compile(r"from_pretrained\(\.\.\., dtype=\S+, attn_implementation='(?P<attn>\w+)'\)")


_KERNEL_OF = {name: kernel for kernel, name in ATTN_IMPLEMENTATION.items()}


def _attention(attn_implementation: str) -> str | None:
    """Workload.attention of a transformers attn_implementation name (None for one the estimator does not price)."""
    return _KERNEL_OF.get(attn_implementation)


def _header_attention(head: str) -> str:
    """A custom loop's attention from its settings line (from_pretrained(..., attn_implementation='...'))."""
    found = _ATTENTION.search(head)
    return (_attention(found.group("attn")) if found else None) or "sdpa"
