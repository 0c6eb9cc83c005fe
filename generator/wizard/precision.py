"""The wizard's precision question (issue 20): bf16 or fp8, asked once the machine and the model are loaded, because
whether fp8 is offered depends on the GPU and its label carries the predicted gain of this very configuration.

Asked only for a full fine-tune (train.py refuses fp8 with LoRA/QLoRA) on a GPU whose tensor cores run fp8, and only
when the bf16 plan exists to compare with (when nothing fits, the rescue comes first and fp8 would not make it fit).
Elsewhere it is skipped: the plan's lever line says why fp8 is not offered."""

from __future__ import annotations

from dataclasses import dataclass, replace

from generator.errors import UserError
from generator.estimate.precision import fp8_supported
from generator.plan.types import Plan, PlanRequest
from generator.wizard.runner import Answers, QuestionSpec


@dataclass(frozen=True)
class Fp8Gain:
    """What choosing fp8 is predicted to change, as the two plans the wizard would write show it."""

    bf16_tokens_per_s: float
    """Predicted tokens/s of the whole job (all GPUs) of the bf16 plan."""
    fp8_tokens_per_s: float | None
    """The same for the fp8 plan; None when nothing fits in fp8 as asked."""


def _job_tokens_per_s(plan: Plan) -> float:
    return plan.estimate.tokens_per_s_per_gpu * plan.num_processes


def fp8_gain(topology, model, request: PlanRequest) -> Fp8Gain | None:
    """The predicted gain of fp8 over bf16 for this request, or None when fp8 is not to be offered (not a full
    fine-tune, no fp8 tensor cores, or no bf16 plan to compare with)."""
    from generator.plan.planner import make_plan

    if request.method != "full":
        return None
    try:
        bf16 = make_plan(topology, model, replace(request, precision="bf16"))
    except UserError:
        return None
    if not fp8_supported(bf16.gpu_name):
        return None
    try:
        fp8 = _job_tokens_per_s(make_plan(topology, model, replace(request, precision="fp8")))
    except UserError:
        fp8 = None
    return Fp8Gain(_job_tokens_per_s(bf16), fp8)


def precision_choices(answers: Answers) -> list[tuple[str, str]]:
    gain: Fp8Gain = answers["_gain"]
    if gain.fp8_tokens_per_s is None:
        predicted = "predicted not to fit as asked"
    else:
        ratio = gain.fp8_tokens_per_s / gain.bf16_tokens_per_s
        both = f"{gain.fp8_tokens_per_s:,.0f} vs {gain.bf16_tokens_per_s:,.0f}"
        predicted = f"predicted {ratio - 1:+.0%} tokens/s ({both})"
    return [
        ("bf16 (the default)", "bf16"),
        (f"fp8 (torchao float8 Linears): {predicted}; predicted, not measured", "fp8"),
    ]


PRECISION = QuestionSpec("precision", "select", "Precision?", precision_choices, default="bf16")


def for_method(request: PlanRequest, method: str) -> PlanRequest:
    """`request` switched to `method`, back in bf16 when the new method is not a full fine-tune (train.py refuses
    fp8 with LoRA/QLoRA)."""
    return replace(request, method=method, precision=request.precision if method == "full" else "bf16")
