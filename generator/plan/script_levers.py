"""The levers a launched script really has (estimate.scripts.ScriptFacts) as the plan words them: what the chosen
script cannot pull, and what train.py, which has them all, is predicted to do with the same request (one line,
never silently: a TRL user should know by how much the other script would be faster, and how to switch)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from generator.errors import UserError
from generator.estimate.scripts import TRL_DTYPE, default_load_dtype, script_facts
from generator.plan.policy import TIE_TOLERANCE
from generator.plan.rows import Row
from generator.plan.types import Plan, PlanRequest

SCRIPT_NAMES = {"train.py": "train.py", "trainer": "the Trainer / TRL", "custom": "your Accelerate loop"}


def lever_words(plan: Plan) -> list[str]:
    """The speed levers a plan pulled, in words (empty when it pulled none)."""
    w = plan.workload
    words = []
    if w.precision == "fp8":
        words.append("float8")
    if w.attention == "flex":
        words.append("flex attention")
    if w.liger:
        words.append("Liger" + (" (its kernels only: TRL keeps its own loss)" if w.script == "trainer" else ""))
    return words


def missing_levers(script: str) -> list[str]:
    """What train.py can do that `script` cannot be told to do."""
    facts, out = script_facts(script), []
    if not facts.fp8:
        out.append("float8")
    if "flex" not in facts.attentions:
        out.append("flex attention (unless your loop loads the model with attn_implementation='flex_attention': "
                   "--attention flex)")  # fmt: skip
    if facts.liger == "none":
        out.append("Liger (unless your loop applies it: --liger)")
    elif facts.liger == "kernels":
        out.append("Liger's fused cross-entropy (TRL turns it off and keeps its own chunked loss)")
    return out


def versus_train_py(request: PlanRequest, chosen: Row, plan_with: Callable[[PlanRequest], Plan]) -> list[str]:
    """One line: train.py's own plan for this request against the chosen script's (total tokens/s over the GPUs each
    uses), with the levers that make the difference. `plan_with` plans a request on the same machine and model."""
    alternative = replace(
        request,
        script="train.py",
        script_path=None,
        # the same numerics: the dtype the user's script loads in, the same adapters
        load_dtype=chosen.option.workload.load_dtype,
        lora_targets=chosen.option.workload.lora_targets,
    )
    try:
        other = plan_with(alternative)
    except UserError:
        return []
    mine = chosen.total_tps
    theirs = other.estimate.tokens_per_s_per_gpu * other.num_processes  # total over every GPU each plan uses
    gain = theirs / mine - 1 if mine else 0.0
    name = SCRIPT_NAMES[request.script]
    cannot = missing_levers(request.script)
    head = f"script {request.script}: the plan uses only levers {name} has" + (
        f" (not {', '.join(cannot)})" if cannot else ""
    )
    if gain <= TIE_TOLERANCE:
        per_gpu = other.estimate.tokens_per_s_per_gpu
        if gain < -TIE_TOLERANCE:
            verdict = f"slower here ({per_gpu:,.0f} tokens/s/GPU, {gain:+.0%})"
        elif abs(gain) < 0.0005:
            verdict = f"the same here ({per_gpu:,.0f} tokens/s/GPU)"
        else:  # a tie: the estimate cannot tell throughputs this close apart
            verdict = f"within {TIE_TOLERANCE:.0%} here ({per_gpu:,.0f} tokens/s/GPU, {gain:+.1%})"
        return [f"{head}; train.py is predicted {verdict}"]
    levers = lever_words(other)
    how = f" with {', '.join(levers)}" if levers else ""
    return [
        f"{head}; train.py would be predicted {gain:+.0%} faster: {other.estimate.tokens_per_s_per_gpu:,.0f} "
        f"tokens/s/GPU on {other.num_processes} GPU(s){how}, micro-batch {other.workload.micro_batch}, "
        f"checkpointing {'on' if other.workload.grad_checkpointing else 'off'} (plan with --script train.py and "
        "launch train.py to take it)"
    ]


DTYPE_FLAG = {"trainer": "--dtype"}
"""The script's own flag for the load dtype, where it is not ours (--load-dtype)."""


def load_dtype_reason(request: PlanRequest, chosen: Row, estimate_all: Callable) -> list[str]:
    """Where the planner loaded the weights in another dtype than the script's own default (TRL's float32 for a LoRA
    or QLoRA base): one line with the numerics and the same plan's prediction at the default, so the choice is never
    silent. `estimate_all` is the engines' (model and headroom bound)."""
    w = chosen.option.workload
    default = default_load_dtype(request.script, request.method)
    if request.load_dtype != "auto" or w.load_dtype == default:  # train.py's and a loop's auto is their default
        return []
    twin = estimate_all(replace(w, load_dtype=default), chosen.option.placement, (chosen.estimate.strategy,))
    flag = DTYPE_FLAG.get(request.script, "--load-dtype")
    head = (
        f"load dtype {w.load_dtype} ({flag} {TRL_DTYPE[w.load_dtype]}), not {SCRIPT_NAMES[request.script]}'s "
        f"default {TRL_DTYPE[default]}: the frozen base and the residual stream in bf16 while the adapters stay "
        "fp32 (peft upcasts them; TRL keeps them bf16 under ZeRO-3), as train.py's LoRA does"
    )
    if not twin:
        return [f"{head}; --load-dtype {default} keeps the default"]
    e, other = chosen.estimate, twin[0]
    if other.fits:
        gain = e.tokens_per_s_per_gpu / other.tokens_per_s_per_gpu - 1 if other.tokens_per_s_per_gpu else 0.0
        versus = (f"predicted {gain:+.0%} tokens/s and {other.reserved_gb - e.reserved_gb:.1f} GB less reserved per "
                  f"GPU than the same plan in {TRL_DTYPE[default]} ({other.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, "
                  f"{other.reserved_gb:.1f} GB)")  # fmt: skip
    else:
        versus = f"the same plan in {TRL_DTYPE[default]} would need {other.reserved_gb:.1f} GB per GPU, over the card"
    return [f"{head}; {versus} (--load-dtype {default} keeps the default)"]
