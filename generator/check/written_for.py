"""The workload a generator-written config was planned for, read back from its comment header (None for any other
config): `check` then judges memory for that workload instead of its own defaults, under the script being checked."""

from __future__ import annotations

import re
import shlex

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

    from generator.estimate.scripts import FACTS, default_load_dtype

    name = script.group("script") if script else "train.py"
    facts = FACTS.get(name, FACTS["train.py"])
    workload = Workload(
        method=w.group("method"),
        seq_len=int(w.group("seq")),
        micro_batch=int(w.group("mb")),
        grad_accum=int(w.group("ga")),
        grad_checkpointing=ckpt is None or ckpt.group("ckpt") == "on",
        load_dtype=flag("--load-dtype", default_load_dtype(facts.name, w.group("method"))),
        lora_r=int(flag("--lora-r", "16")),
        liger="--liger" in argv,
        attention="flex" if flag("--attn-implementation", "sdpa") == "flex_attention" else "sdpa",
        script=facts.name,
        precision=flag("--precision", "bf16"),
        grad_as_bucket_view=facts.grad_as_bucket_view,
    )
    return w.group("model"), workload
