"""The wizard's precision question (issue 20): bf16 or fp8, asked once the machine and the model are loaded, because
whether fp8 is offered depends on the GPU and each choice's label carries the predicted tokens/s of this very job.

Asked for a full or LoRA fine-tune (train.py refuses fp8 with QLoRA) on a GPU whose tensor cores run fp8, and only
when the bf16 plan exists to compare with (when nothing fits, the rescue comes first and fp8 would not make it fit).
Its default is what `plan --precision auto` resolves to (generator.plan.precision). Elsewhere it is skipped: the plan
then runs under auto, and its lever line says why fp8 is not taken."""

from __future__ import annotations

from dataclasses import dataclass, replace

from generator.errors import UserError
from generator.estimate.precision import fp8_supported
from generator.estimate.scripts import script_facts
from generator.plan.precision import FP8_METHODS, unmeasured
from generator.plan.types import Plan, PlanRequest
from generator.ui.installed import installed_fields
from generator.wizard.runner import Answers, QuestionSpec


@dataclass(frozen=True)
class Fp8Gain:
    """What each precision is predicted to give, as the plans the wizard would write show it."""

    bf16_tokens_per_s: float
    """Predicted tokens/s of the whole job (all GPUs) of the bf16 plan."""
    fp8_tokens_per_s: float | None
    """The same for the fp8 plan; None when nothing fits in fp8 as asked."""
    default: str = "bf16"
    """What --precision auto resolves to for this request: the question's default."""
    unmeasured: str | None = None
    """Why the fp8 plan is predicted only (None: DDP on one H200, the measured kind)."""
    installed: bool = True
    """torchao is importable here (train.py --precision fp8 needs it)."""


def _job_tokens_per_s(plan: Plan) -> float:
    return plan.estimate.tokens_per_s_per_gpu * plan.num_processes


def precision_fields() -> dict:
    """PlanRequest fields the wizard leaves to auto: whether torchao is importable where the job runs (as `plan`)."""
    return {"fp8_installed": installed_fields()["fp8_installed"]}


def fp8_gain(topology, model, request: PlanRequest) -> Fp8Gain | None:
    """Both precisions' predicted tokens/s and auto's choice for this request, or None when the question is not to
    be asked (QLoRA, no fp8 tensor cores, or no bf16 plan to compare with). Each number is that of the plan the
    choice writes: auto's plan for the precision auto resolves to, the forced precision's plan for the other."""
    from generator.plan.planner import make_plan

    if request.method not in FP8_METHODS or not script_facts(request.script).fp8:
        return None
    try:
        auto = make_plan(topology, model, replace(request, precision="auto"))
    except UserError:
        return None
    if not fp8_supported(auto.gpu_name):
        return None
    default = auto.workload.precision
    try:
        other = make_plan(topology, model, replace(request, precision="fp8" if default == "bf16" else "bf16"))
    except UserError:
        other = None
    bf16, fp8 = (auto, other) if default == "bf16" else (other, auto)
    return Fp8Gain(
        _job_tokens_per_s(bf16),
        _job_tokens_per_s(fp8) if fp8 else None,
        default=default,
        unmeasured=unmeasured(fp8.gpu_name, fp8.strategy, fp8.num_processes) if fp8 else None,
        installed=request.fp8_installed,
    )


def precision_choices(answers: Answers) -> list[tuple[str, str]]:
    """(title, value): the recommended one (auto's resolution) answers "auto", so the plan written is auto's."""
    gain: Fp8Gain = answers["_gain"]
    bf16 = f"bf16: predicted {gain.bf16_tokens_per_s:,.0f} tokens/s"
    if gain.fp8_tokens_per_s is None:
        fp8 = "fp8 (torchao float8 Linears): predicted not to fit as asked"
    else:
        ratio = gain.fp8_tokens_per_s / gain.bf16_tokens_per_s
        fp8 = f"fp8 (torchao float8 Linears): predicted {gain.fp8_tokens_per_s:,.0f} tokens/s ({ratio - 1:+.0%})"
        fp8 += f"; predicted, not measured: {gain.unmeasured}" if gain.unmeasured else "; measured faster on one H200"
    if not gain.installed:
        fp8 += "; needs torchao (pip install 'dist-config-generator[fp8]')"
    return [
        (title + " (recommended)", "auto") if value == gain.default else (title, value)
        for title, value in ((bf16, "bf16"), (fp8, "fp8"))
    ]


# the recommended choice answers "auto" (precision_choices), so it is the one the cursor starts on
PRECISION = QuestionSpec("precision", "select", "Precision?", precision_choices, default="auto")


def for_method(request: PlanRequest, method: str) -> PlanRequest:
    """`request` switched to `method`; under QLoRA (train.py refuses fp8) the precision goes back to auto, which
    resolves to bf16 and says why."""
    return replace(request, method=method, precision=request.precision if method in FP8_METHODS else "auto")
