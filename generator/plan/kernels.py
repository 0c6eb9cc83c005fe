"""Attention kernel and Liger, chosen like micro-batch and checkpointing (issue 17): the options a request leaves
open, the tie-break among them, and the reasons the plan gives in words."""

from __future__ import annotations

from dataclasses import replace

from generator.catalog.liger import liger_not_planned, liger_plannable
from generator.errors import UserError
from generator.estimate.attention import ATTN_IMPLEMENTATION
from generator.estimate.scripts import script_facts
from generator.model.types import ModelSpec
from generator.plan.engines import Engines
from generator.plan.rows import Row
from generator.plan.types import PlanRequest

KERNEL_NAMES = {"sdpa": "SDPA", "flex": "flex_attention", "eager": "eager attention"}
"""Workload.attention -> how the plan's lines name it."""


FLEX_COMPILE_NOTE = (
    "flex attention compiles its kernels in the first step, which the tokens/s above leave out: on one H200 47 s "
    "for Mistral-7B LoRA and 231 s for its full fine-tune with checkpointing under TRL's CLI (bench/results/"
    "h200-x1-trl-cli-2026-12-01.json), a first step of 171 s for Qwen2.5-7B LoRA at 16,384 tokens under train.py "
    "(bench/results/h200-x1-families-qwen16k-2026-12-04.json); on a run of a few hundred steps that can cost more "
    "than flex saves"
)


def attentions_to_estimate(request: PlanRequest, model: ModelSpec) -> tuple[str, ...]:
    """The attention kernels to estimate: the script's (ScriptFacts.attentions) that the architecture loads with
    (ModelSpec.attentions), or eager where it has none of them (every transformers model has eager). An explicit
    --attention the architecture does not have is a user error: transformers would refuse it at load."""
    if request.attention != "auto":
        if request.attention not in model.attentions:
            raise UserError("{}: use {}".format(*unsupported_attention(model, request.attention)))
        return (request.attention,)
    return tuple(a for a in script_facts(request.script).attentions if a in model.attentions) or ("eager",)


def unsupported_attention(model: ModelSpec, attention: str) -> tuple[str, str]:
    """(what is wrong, the --attention values the architecture has) for a kernel it lacks."""
    problem = (
        f"{model.model_type} has no {KERNEL_NAMES[attention]} in transformers (its model class does not support "
        f"attn_implementation={ATTN_IMPLEMENTATION[attention]!r})"
    )
    return problem, " or ".join(f"--attention {a}" for a in model.attentions)


def kernel_options(request: PlanRequest, model: ModelSpec) -> list[tuple[str, bool]]:
    """(attention, liger) pairs worth estimating, among the levers the script has (ScriptFacts.attentions, .liger)
    and the kernels the architecture loads with (attentions_to_estimate): an explicit --attention / --liger is the user
    declaring what their script does. flex needs a GPU and torch >= 2.5, which a plan for GPUs may assume; Liger
    only where it is importable where the job runs (request.liger_installed) and known to work on the architecture
    (catalog.liger: measured, or the measured kernels)."""
    facts = script_facts(request.script)
    attentions = attentions_to_estimate(request, model)
    # the Trainer's Liger is its kernels with TRL's own loss kept (estimate.scripts.liger_kernels): chosen on that
    may = request.liger_installed and facts.liger != "none" and liger_plannable(model.model_type)
    ligers = (request.liger,) if request.liger is not None else (False, True)[: 1 + may]
    return [(a, lg) for a in attentions for lg in ligers]


KERNEL_LEVERS = ("attention", "liger", "precision", "compiled_layers")
"""The Workload fields a row's kernels are chosen by (a twin differs in one of them)."""


def kernel_rank(row: Row) -> int:
    """Tie-break among kernels the estimator cannot tell apart: the fewest extras (SDPA, no Liger, bf16, eager)
    first."""
    w = row.option.workload
    return (
        (w.attention != "sdpa") + int(w.liger) + (w.precision == "fp8") + (w.compiled_layers and w.precision != "fp8")
    )


def same_but(row: Row, rows: list[Row], **changes) -> Row | None:
    """The row with the same GPUs, batch and strategy but other kernels (None when not estimated or not fitting)."""
    w, o = row.option.workload, row.option
    for r in rows:
        rw = r.option.workload
        same = r.estimate.strategy == row.estimate.strategy and r.option.choice == o.choice
        same = same and r.option.batch == o.batch
        kept = all(getattr(rw, k) == getattr(w, k) for k in KERNEL_LEVERS if k not in changes)
        if same and kept and all(getattr(rw, k) == v for k, v in changes.items()):
            return r
    return None


def kernel_reasons(request: PlanRequest, chosen: Row, rows: list[Row], model: ModelSpec) -> list[str]:
    w = chosen.option.workload
    tps = chosen.estimate.tokens_per_s_per_gpu
    out = []
    name = KERNEL_NAMES[w.attention]
    lacking = [a for a in script_facts(request.script).attentions if a not in model.attentions]
    if request.attention == "auto" and lacking:
        missing = " or ".join(KERNEL_NAMES[a] for a in lacking)
        out.append(
            f"attention: {name}: {model.model_type} has no {missing} in transformers (its model class does not "
            f"support it), so the plan prices {name}"
        )
    elif request.attention == "auto" and len(script_facts(request.script).attentions) == 1:
        out.append(
            f"attention: {name}, what a plain loop's from_pretrained uses (--attention flex if your loop loads the "
            "model with attn_implementation='flex_attention')"
        )
    elif request.attention == "auto":
        other = same_but(chosen, rows, attention="sdpa" if w.attention == "flex" else "flex")
        if other is not None and other.estimate.fits:
            versus = other.estimate.tokens_per_s_per_gpu
            why = (
                "SDPA gets a dense mask here (packed documents, or a sliding window shorter than the sequence) and "
                "computes every score"
                if w.attention == "flex"
                else "no faster on this workload, and SDPA needs nothing beyond PyTorch"
            )
            alt = "SDPA" if w.attention == "flex" else "flex_attention"
            out.append(f"attention: {name}, predicted {tps:,.0f} tokens/s/GPU vs {versus:,.0f} with {alt} ({why})")
        else:
            out.append(f"attention: {name} (the other kernel does not fit this configuration)")
    else:
        out.append(f"attention: {name} (--attention {request.attention})")
    if w.attention == "flex":
        out.append(FLEX_COMPILE_NOTE)
    if request.doc_tokens is None:
        out.append(
            "documents assumed to fill each sequence (flex's least favourable case); --doc-tokens N or "
            "--dataset FILE refines it"
        )
    if request.liger is None and not liger_plannable(model.model_type):
        out.append(liger_not_planned(model.model_type))
    elif request.liger is None and request.liger_installed:
        other = same_but(chosen, rows, liger=not w.liger)
        if other is not None:
            verb = "on" if w.liger else "off"
            out.append(
                f"Liger {verb}: predicted {tps:,.0f} tokens/s/GPU vs {other.estimate.tokens_per_s_per_gpu:,.0f} "
                f"{'without' if w.liger else 'with'} it"
            )
    elif request.liger is not None:
        out.append(f"Liger {'on' if request.liger else 'off'} (--{'' if request.liger else 'no-'}liger)")
    return out


def liger_gain_reason(chosen_tps: float, with_liger_tps: float) -> str:
    """What installing Liger is predicted to buy, when it is not importable here."""
    gain = 100.0 * (with_liger_tps / chosen_tps - 1) if chosen_tps else 0.0
    return (
        f"Liger is not installed here: with it (pip install liger-kernel) this configuration is predicted "
        f"{gain:+.0f}% tokens/s ({with_liger_tps:,.0f}/GPU), and its memory saving may fit a larger micro-batch"
    )


def liger_gain(model: ModelSpec, request: PlanRequest, chosen: Row, engines: Engines) -> list[str]:
    """Where Liger is left to the planner but not importable here: what installing it is predicted to gain."""
    if request.liger is not None or request.liger_installed or script_facts(request.script).liger != "full":
        return []
    if not liger_plannable(model.model_type):
        return []
    o = chosen.option
    fused = engines.estimate_all(
        model, replace(o.workload, liger=True), o.placement, (chosen.estimate.strategy,), request.headroom
    )
    return [liger_gain_reason(chosen.estimate.tokens_per_s_per_gpu, fused[0].tokens_per_s_per_gpu)] if fused else []
