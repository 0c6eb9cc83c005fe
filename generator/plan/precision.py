"""Precision as a planned lever (issue 20): which precisions a request lets the planner estimate, which strategies run
an fp8 workload, and the plan's words about it.

--precision auto (the default) estimates fp8 beside bf16 where float8 was measured to pay under train.py (one H200,
DDP, full and LoRA: docs/fp8.md, MEASURED_FILE) and lets the planner choose it like any other lever: the GPU has fp8
tensor cores, the method keeps a bf16 Linear for float8 to take (full, LoRA), torchao is importable where the job runs,
and the strategy is DDP (its gradient traffic is unchanged by float8; FSDP2 and DeepSpeed are unmeasured, issue 21).
The planner then takes fp8 only where the estimator predicts it faster than bf16 beyond a tie (policy.pick). Explicit
--precision fp8 runs wherever train.py supports it (not QLoRA, not DeepSpeed), labelled predicted where unmeasured."""

from __future__ import annotations

from dataclasses import replace

from generator.catalog import strategies as catalog
from generator.catalog.gpus import find_gpu
from generator.errors import UserError
from generator.estimate.precision import PRECISIONS, fp8_refusal, fp8_supported
from generator.estimate.scripts import script_facts
from generator.model.types import ModelSpec
from generator.plan.engines import Engines
from generator.plan.policy import TIE_TOLERANCE, pick
from generator.plan.reasons import setting
from generator.plan.rows import Row
from generator.plan.types import PlanRequest

PRECISION_CHOICES = ("auto", *PRECISIONS)
"""--precision values of plan and the wizard."""
FP8_METHODS = ("full", "lora")
"""Methods train.py runs in float8 (QLoRA's base is 4-bit: no bf16 Linear for float8 to take)."""
MEASURED_GPU = "H200 SXM"
"""The catalog part float8 was measured on (issue 20)."""
MEASURED_FILE = "bench/results/h200-x1-fp8-2026-12-01-rerun.json"
"""Where the measured fp8 rows are (cited in words: the planning path reads no file)."""
MEASURED = (
    f"float8 measured faster than bf16 under train.py on one H200, DDP, full and LoRA ({MEASURED_FILE}, docs/fp8.md)"
)
COMPILE = "the first steps compile each decoder layer (tens of seconds, not counted in tokens/s)"
NOT_ON_DEEPSPEED = "train.py's float8 path (torchao) is not built for DeepSpeed engines"


def require_fp8_runnable(request: PlanRequest, gpu_name: str) -> None:
    """One clear line when fp8 is asked for where it cannot run: a GPU without fp8 tensor cores (A100, T4, ...)."""
    if request.precision == "fp8" and not fp8_supported(gpu_name):
        raise UserError(fp8_refusal(gpu_name))


def request_problem(request: PlanRequest) -> str | None:
    """Explicit --precision fp8 with a method or strategy train.py does not run in float8 (request_check's line)."""
    if request.precision != "fp8":
        return None
    if not script_facts(request.script).fp8:
        return (
            f"--precision fp8 does not apply to --script {request.script}: only train.py has a float8 path (the "
            "Trainer's bf16=True overrides the config's mixed precision); use --script train.py --precision fp8 or "
            "--precision bf16"
        )
    if request.method not in FP8_METHODS:
        return (
            f"--precision fp8 does not apply to --method {request.method}: QLoRA's base is 4-bit, so there is no bf16 "
            "Linear for float8 to take; use --method lora --precision fp8 or --precision bf16"
        )
    if catalog.is_known(request.strategy) and catalog.strategy(request.strategy).framework == "deepspeed":
        return f"--precision fp8 does not run with --strategy {request.strategy}: {NOT_ON_DEEPSPEED}; use a DDP or " + (
            "FSDP strategy, or --precision bf16"
        )
    return None


def auto_blocker(request: PlanRequest, gpu_name: str) -> str | None:
    """Why --precision auto does not consider fp8 here, whatever the strategy (None: it does)."""
    if not fp8_supported(gpu_name):
        return f"fp8 not offered: {fp8_refusal(gpu_name).split(': ', 1)[1].split(';')[0]}"
    if request.method not in FP8_METHODS:
        return "fp8 not offered for QLoRA: its base is 4-bit, so there is no bf16 Linear for float8 to take"
    if not script_facts(request.script).fp8:
        return f"fp8 not offered: --script {request.script} has no float8 path (train.py's torchao conversion)"
    if not request.fp8_installed:
        return "fp8 not chosen: torchao is not installed here (pip install 'dist-config-generator[fp8]')"
    return None


def precision_options(request: PlanRequest, gpu_name: str) -> tuple[str, ...]:
    """The precisions worth estimating: the one asked for, or under auto bf16 and, where auto may take it, fp8."""
    if request.precision != "auto":
        return (request.precision,)
    return ("bf16", "fp8") if auto_blocker(request, gpu_name) is None else ("bf16",)


def strategy_refusal(request: PlanRequest, precision: str, strategy: str) -> str | None:
    """Why `strategy` does not run a `precision` workload of this request (None: it does). Listed by the plan with the
    strategies that are not applicable."""
    if precision != "fp8":
        return None
    framework = catalog.strategy(strategy).framework
    if framework == "deepspeed":
        return f"{NOT_ON_DEEPSPEED} (fp8 rows)"
    if framework == "fsdp" and request.precision == "auto":
        return (
            f"--precision auto takes fp8 only under DDP: float8 is not measured under FSDP2 ({MEASURED_FILE} holds "
            "DDP rows only; fp8 rows)"
        )
    return None


def unmeasured(gpu_name: str, strategy: str, num_gpus: int) -> str | None:
    """Why an fp8 plan is predicted only (None where it is the measured kind: DDP on one H200)."""
    if catalog.strategy(strategy).framework != "ddp":
        return f"float8 is not measured under FSDP2 (the measured rows, {MEASURED_FILE}, are DDP on one H200)"
    if num_gpus > 1:
        return f"float8 is measured on one GPU, not on {num_gpus} ({MEASURED_FILE})"
    part = find_gpu(gpu_name)
    if part is None or part.name != MEASURED_GPU:
        return f"float8 is measured on an H200, not on {part.name if part else gpu_name}"
    return None


def _same_row_at(model: ModelSpec, request: PlanRequest, chosen: Row, engines: Engines, precision: str):
    """The chosen row's estimate at another precision (None when the strategy does not run there)."""
    o = chosen.option
    w = replace(o.workload, precision=precision)
    found = engines.estimate_all(model, w, o.placement, (chosen.estimate.strategy,), request.headroom)
    return found[0] if found else None


def _runner_up(chosen: Row, rows: list[Row]) -> Row | None:
    """The row the planner would take in bf16 on the chosen GPUs: the fitting bf16 rows, eager or compiled, at any
    batch, ranked as the planner ranks (None where no bf16 row fits)."""
    fitting = [
        r
        for r in rows
        if r.estimate.fits and r.option.workload.precision == "bf16" and r.option.choice == chosen.option.choice
    ]
    return pick(fitting) if fitting else None


def _versus_bf16(model: ModelSpec, request: PlanRequest, chosen: Row, engines: Engines, rows: list[Row]) -> str:
    """fp8 against what bf16 would run: the planner's bf16 pick (compiled layers where it would take them, its own
    micro-batch and checkpointing), not the same configuration eager, which overstates float8's gain where compiling
    alone fuses the elementwise passes or the eager layer does not fit at this batch."""
    tps = chosen.estimate.tokens_per_s_per_gpu
    best = _runner_up(chosen, rows)
    if best is not None:
        how = ("compiled layers, " if best.option.workload.compiled_layers else "eager layers, ") + setting(best)
        bf16 = best.estimate.tokens_per_s_per_gpu
        return f" vs {bf16:,.0f} in bf16 ({tps / bf16:.2f}x; the plan's bf16 pick: {best.estimate.strategy}, {how})"
    same = _same_row_at(model, request, chosen, engines, "bf16")
    if same is None:
        return ""
    fits = "" if same.fits else f", which needs {same.reserved_gb:.1f} GB > {same.capacity_gb:.1f} GB usable"
    ratio = tps / same.tokens_per_s_per_gpu
    return f" vs {same.tokens_per_s_per_gpu:,.0f} in bf16 ({ratio:.2f}x; this configuration, eager{fits})"


def precision_reasons(
    model: ModelSpec, request: PlanRequest, chosen: Row, engines: Engines, rows: list[Row] = ()
) -> list[str]:
    """For an fp8 plan: why fp8, this row against the planner's bf16 pick among `rows` (or, with none that fits, the
    same configuration in bf16), and what is measured (goes into the config header)."""
    if chosen.option.workload.precision != "fp8":
        return []
    tps = chosen.estimate.tokens_per_s_per_gpu
    versus = _versus_bf16(model, request, chosen, engines, list(rows))
    how = (
        "chosen by --precision auto: DDP, fp8 tensor cores, torchao installed, predicted faster"
        if request.precision == "auto"
        else "--precision fp8"
    )
    why_not = unmeasured(chosen.option.placement.gpu_name, chosen.estimate.strategy, chosen.num_gpus)
    label = f"predicted, not measured here: {why_not}" if why_not else MEASURED
    return [
        f"precision fp8 ({how}; train.py converts the decoder's Linear layers to torchao float8, lm_head, embedding, "
        f"norms and attention stay bf16): predicted {tps:,.0f} tokens/s/GPU{versus}, MFU in bf16-equivalent FLOPs; "
        f"{label}; {COMPILE}; --precision bf16 opts out"
    ]


def fp8_lever(model: ModelSpec, request: PlanRequest, chosen: Row, engines: Engines) -> list[str]:
    """For a bf16 plan: why fp8 was not taken, with what --precision fp8 is predicted to gain where it can run
    (Plan.levers)."""
    if chosen.option.workload.precision != "bf16":
        return []
    gpu, strategy = chosen.option.placement.gpu_name, chosen.estimate.strategy
    blocker = auto_blocker(request, gpu)
    if not script_facts(request.script).fp8:
        return []  # the script has no float8 path: script_reasons says what train.py would do instead
    if blocker and (not fp8_supported(gpu) or request.method not in FP8_METHODS):
        return [blocker]
    if catalog.strategy(strategy).framework == "deepspeed":
        return [f"fp8 not offered under {strategy}: {NOT_ON_DEEPSPEED}"]
    fp8 = _same_row_at(model, request, chosen, engines, "fp8")
    if fp8 is None:
        return []
    tps = chosen.estimate.tokens_per_s_per_gpu
    ratio = fp8.tokens_per_s_per_gpu / tps if tps else 0.0
    fits = "" if fp8.fits else f", but needs {fp8.reserved_gb:.1f} GB > {fp8.capacity_gb:.1f} GB usable"
    gain = (
        f"with --precision fp8 (torchao float8 Linears) this configuration is predicted {ratio - 1:+.0%} tokens/s "
        f"({fp8.tokens_per_s_per_gpu:,.0f}/GPU, {ratio:.2f}x bf16{fits})"
    )
    why_not = unmeasured(gpu, strategy, chosen.num_gpus)
    label = f"predicted, not measured: {why_not}" if why_not else MEASURED
    if request.precision == "bf16":
        head = "fp8 not chosen: --precision bf16 (as asked)"
    elif blocker:
        head = blocker
    elif catalog.strategy(strategy).framework != "ddp":
        head = f"fp8 not chosen under {strategy}: --precision auto takes it only under DDP"
    elif not fp8.fits:
        head = "fp8 not chosen: it does not fit this configuration"
    elif fp8.layers_from_operators:
        head = (
            "fp8 not chosen: this MoE's float8 layers (compiled, as float8 compiles them) are priced from their "
            "operators, which the planner does not choose on; `probe --compute --full --model "
            f"{model.name}` times them whole"
        )
    elif ratio < 1 + TIE_TOLERANCE:
        head = f"fp8 not chosen: not predicted faster than bf16 beyond a {TIE_TOLERANCE:.0%} tie"
    else:
        head = "fp8 not chosen: a bf16 configuration is predicted as fast"
    return [f"{head}; {gain}; {label}"]
