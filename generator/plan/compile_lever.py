"""train.py's --compile-layers as a planned lever: where the planner may take it, where it refuses it, and the plan's
words about it.

Left to the planner (neither --compile-layers nor --no-compile-layers), a bf16 plan for train.py estimates each
configuration eager and with every decoder layer compiled, and takes the compiled one where it is predicted faster
beyond a tie (policy.pick; on a tie eager wins: nothing to compile). Offered only where it was measured: train.py,
a full fine-tune or LoRA (QLoRA's 4-bit layers are not), DDP, and for a mixture of experts only where the compute
table holds its compiled layer rows (an MoE priced from operators misses by a quarter or more). float8 compiles its
layers anyway, so an fp8 row is never estimated twice."""

from __future__ import annotations

from dataclasses import replace

from generator.catalog import strategies as catalog
from generator.catalog.gpus import find_gpu
from generator.estimate.scripts import script_facts
from generator.estimate.types import Estimate, Workload
from generator.plan.kernels import same_but
from generator.plan.policy import TIE_TOLERANCE
from generator.plan.rows import Option, Row
from generator.plan.types import PlanRequest

COMPILE_METHODS = ("full", "lora")
"""Methods whose layers train.py was measured compiled (bf16 or float8 Linears; not QLoRA's NF4 ones)."""
MEASURED_GPU = "H200 SXM"
"""The catalog part the pairs ran on."""
MEASURED_FILE = "bench/results/h200-x1-families-compile-pairs-2026-12-04.json"
MEASURED = (
    "measured on one H200 under DDP against eager: seven dense LoRA and full fine-tunes 1.17-1.64x, the compiled "
    f"rows predicted within 4% ({MEASURED_FILE} and its -b, -c); Mixtral cut to 8 layers, LoRA, 1.36x "
    "(h200-x1-families-moe-compiled-2026-12-04.json)"
)
FIRST_STEPS = "the first steps compile one decoder layer's graphs (10-20 s measured, not counted in tokens/s)"
NO_COMPILE_ON_DEEPSPEED = "train.py compiles its layers under DDP and FSDP2 only: not measured under a DeepSpeed engine"


def compile_problem(request: PlanRequest) -> str | None:
    """--compile-layers where it cannot run: a script without the flag, or an explicit DeepSpeed strategy."""
    if request.compile_layers is not True:
        return None
    if not script_facts(request.script).compile_layers:
        return (
            f"--compile-layers does not apply to --script {request.script}: it is train.py's flag (each decoder layer "
            "compiled in place); drop it, or plan --script train.py"
        )
    if catalog.is_known(request.strategy) and catalog.strategy(request.strategy).framework == "deepspeed":
        return (
            f"--compile-layers does not run with --strategy {request.strategy}: {NO_COMPILE_ON_DEEPSPEED}; use ddp "
            "or fsdp"
        )
    return None


def compile_options(request: PlanRequest, precision: str) -> tuple[bool, ...]:
    """compiled_layers values worth estimating at `precision`: the one asked for, else eager and, where the planner
    may take it, compiled."""
    if request.compile_layers is not None:
        return (request.compile_layers,)
    if precision == "fp8" or not script_facts(request.script).compile_layers or request.method not in COMPILE_METHODS:
        return (False,)
    return (False, True)


def compile_refusal(request: PlanRequest, workload: Workload, strategy: str) -> str | None:
    """Why `strategy` does not run this compiled workload (None: it does, or the workload is eager)."""
    if not workload.compiled_layers:
        return None
    framework = catalog.strategy(strategy).framework
    if framework == "deepspeed":
        return f"{NO_COMPILE_ON_DEEPSPEED} (--compile-layers)"
    if request.compile_layers is None and framework != "ddp":
        return "the planner takes --compile-layers only under DDP, where it was measured (compiled rows)"
    return None


def unpriced(request: PlanRequest, workload: Workload, estimate: Estimate) -> bool:
    """A compiled row the planner chose to try that the table cannot price: an MoE with no layer row of its own,
    compiled in bf16 or in float8 (which compiles its layers too) under --precision auto. Priced from operators such
    layers missed both ways before their rows were timed (bf16 Mixtral +26-35%, float8 OLMoE -53% and Mixtral cut to 8
    layers +38%: layer_rows.MOE_OPERATORS_NOTE, bench/REPORT.md), so neither lever is chosen on that price."""
    tried = (request.compile_layers is None and workload.compiled_layers) or (
        request.precision == "auto" and workload.precision == "fp8"
    )
    return tried and estimate.layers_from_operators


def compile_reasons(request: PlanRequest, chosen: Row, rows: list[Row]) -> list[str]:
    """One line on compiled layers: why they are on (asked for, or chosen and by how much), or where the planner
    weighed them, why not, against the chosen row's twin with the other setting among `rows`."""
    w = chosen.option.workload
    if w.precision == "fp8":
        return []  # float8's own line says its layers compile
    twin = same_but(chosen, rows, compiled_layers=not w.compiled_layers)
    eager, compiled = (twin, None) if w.compiled_layers else (None, twin)
    tps = chosen.estimate.tokens_per_s_per_gpu
    if w.compiled_layers and request.compile_layers:
        return [
            "compiled layers (--compile-layers, asked for): train.py compiles each decoder layer in place; an MoE's "
            f"is priced from the probe's compiled layer rows, a dense one's from its fused elementwise passes; "
            f"{FIRST_STEPS}"
        ]
    if w.compiled_layers:
        versus = f" vs {eager.estimate.tokens_per_s_per_gpu:,.0f} eager" if eager else ""
        ratio = f" ({tps / eager.estimate.tokens_per_s_per_gpu:.2f}x)" if eager else ""
        part = find_gpu(chosen.option.placement.gpu_name)
        here = (
            ""
            if part is not None and part.name == MEASURED_GPU
            else f"predicted for {part.name if part else 'this GPU'}, "
        )
        return [
            f"compiled layers (chosen: train.py --compile-layers): predicted {tps:,.0f} tokens/s/GPU{versus}{ratio}, "
            f"the fused norms, SwiGLU, RoPE and residual adds reading memory once; {here}{MEASURED}; {FIRST_STEPS}; "
            "the other strategies are compared as they would run, eager; --no-compile-layers opts out"
        ]
    if request.compile_layers is False or compiled is None:
        return []
    c = compiled.estimate
    if not c.fits:
        why = f"it does not fit ({c.reserved_gb:.1f} GB > {c.capacity_gb:.1f} GB usable)"
    elif c.tokens_per_s_per_gpu < (1 + TIE_TOLERANCE) * tps:
        why = f"not predicted faster beyond a {TIE_TOLERANCE:.0%} tie (eager needs no compile)"
    else:
        why = "a configuration it does not apply to is predicted as fast"
    return [f"compiled layers not chosen: {why}; with --compile-layers predicted {c.tokens_per_s_per_gpu:,.0f} "
            "tokens/s/GPU"]  # fmt: skip


def with_eager_strategies(chosen: Row, options: list[Option]) -> Row:
    """The chosen compiled row with, for every strategy its compiled layers were not estimated under, the eager
    twin's estimate (same GPUs, batch and kernels): what the plan's strategy lines compare it with, since those
    strategies run eager. An eager or float8 row is returned as it is."""
    o = chosen.option
    if not o.workload.compiled_layers or o.workload.precision == "fp8":
        return chosen
    eager_w = replace(o.workload, compiled_layers=False)
    twin = next((x for x in options if (x.choice, x.batch, x.workload) == (o.choice, o.batch, eager_w)), None)
    if twin is None:
        return chosen
    have = {e.strategy for e in o.estimates}
    extra = tuple(e for e in twin.estimates if e.strategy not in have)
    covered = have | {e.strategy for e in extra}
    rest = tuple((s, why) for s, why in twin.not_applicable if s not in covered)
    return Row(replace(o, estimates=o.estimates + extra, not_applicable=rest), chosen.estimate)
