"""The wizard's kernels question: the attention kernels and Liger the chosen script can be told to use (estimate.scripts
.ScriptFacts) that the answered architecture has too (ModelSpec.attentions), or "auto", the planner's pick among them,
as `plan` makes it."""

from __future__ import annotations

from functools import lru_cache

from generator.errors import UserError
from generator.estimate.attention import KERNELS
from generator.ui.installed import installed_fields


@lru_cache(maxsize=8)
def answered_attentions(model: str) -> tuple[str, ...]:
    """The attention kernels the answered model loads with (ModelSpec.attentions); all of them where it cannot be
    read (the model question's validator has already said why)."""
    from generator.model import load_model

    try:
        return load_model(model, compiled=False).attentions
    except UserError:
        return KERNELS


def kernel_choices(script: str, attentions: tuple[str, ...] = KERNELS) -> list[tuple[str, str]]:
    """The kernel levers `script` has (estimate.scripts.ScriptFacts) that the architecture has too (plan.kernels'
    attentions_to_estimate), as answers kernel_fields understands; eager where it has no SDPA."""
    kept = [(label, k) for label, k in _script_kernel_choices(script) if k == "auto" or _attention(k) in attentions]
    if "sdpa" not in attentions:
        kept.append(("Eager attention (this architecture has no SDPA in transformers)", "eager"))
    return kept


def _attention(kernels: str) -> str:
    return "flex" if "flex" in kernels else "eager" if "eager" in kernels else "sdpa"


def _script_kernel_choices(script: str) -> list[tuple[str, str]]:
    if script == "custom":  # the planner cannot switch kernels inside your loop: say what it does
        return [
            ("SDPA (from_pretrained's default)", "sdpa"),
            ("My loop loads flex_attention", "flex"),
            ("My loop applies Liger's kernels", "liger"),
            ("Both: Liger and flex attention", "liger-flex"),
        ]
    auto = "The planner's pick: the fastest predicted that fits (flex attention" + (
        ", Liger where installed)" if script == "train.py" else ", TRL's Liger kernels where installed)"
    )
    liger = (
        "Liger kernels (pip install liger-kernel): less memory, so larger micro-batches fit"
        if script == "train.py"
        else "Liger kernels (use_liger_kernel; TRL keeps its own loss)"
    )
    return [
        (auto, "auto"),
        ("Standard: SDPA attention, nothing extra to install", "sdpa"),
        (liger, "liger"),
        ("Liger + flex attention", "liger-flex"),
        ("Flex attention only", "flex"),
    ]


def kernel_fields(kernels: str) -> dict:
    """PlanRequest fields of the kernels answer: auto leaves attention and Liger to the planner, as `plan` does."""
    if kernels == "auto":
        return {"attention": "auto", "liger": None, "liger_installed": installed_fields()["liger_installed"]}
    return {"attention": _attention(kernels), "liger": "liger" in kernels}
