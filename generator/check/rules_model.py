"""Rules about the model the config trains: an attention kernel its architecture does not load with."""

from __future__ import annotations

from generator.check.types import CheckContext, Finding
from generator.estimate.attention import ATTN_IMPLEMENTATION
from generator.plan.kernels import unsupported_attention


def attention_the_model_has(cfg: dict, ctx: CheckContext) -> list[Finding]:
    """The attention kernel the command (or a custom loop's settings line) names, where the architecture has none of
    it in transformers (ModelSpec.attentions): from_pretrained refuses it before the first step. A config with no
    generator header names no kernel: SDPA is only the assumption there, so the finding is a note."""
    if ctx.model is None or ctx.workload.attention in ctx.model.attentions:
        return []
    problem, fix = unsupported_attention(ctx.model, ctx.workload.attention)
    if ctx.written_for is None:
        kernels = " or ".join(repr(ATTN_IMPLEMENTATION[a]) for a in ctx.model.attentions)
        return [Finding("info", "attention", problem + ".", f"load it with attn_implementation={kernels}.",
                        "attention_the_model_has")]  # fmt: skip
    return [Finding("error", "attention", problem + ".", f"use {fix} (plan picks one).", "attention_the_model_has")]


RULES = [attention_the_model_has]
