"""Precision as a planned lever (issue 20): refuse fp8 where the GPU has no fp8 tensor cores, say what fp8 is predicted
to gain where it has them, and compare the fp8 row with bf16 when fp8 was asked for. fp8 is never chosen unless
asked (--precision fp8): nothing of it is measured yet, so every number here is labelled predicted."""

from __future__ import annotations

from dataclasses import replace

from generator.errors import UserError
from generator.estimate.precision import fp8_refusal, fp8_supported
from generator.model.types import ModelSpec
from generator.plan.engines import Engines
from generator.plan.rows import Row
from generator.plan.types import PlanRequest

UNMEASURED = "predicted only: float8 is not measured under train.py yet (issue 20, docs/fp8.md)"


def require_fp8_gpu(request: PlanRequest, gpu_name: str) -> None:
    """One clear line when fp8 is asked for on a GPU without fp8 tensor cores (A100, T4, ...)."""
    if request.precision == "fp8" and not fp8_supported(gpu_name):
        raise UserError(fp8_refusal(gpu_name))


def _same_row_at(model: ModelSpec, request: PlanRequest, chosen: Row, engines: Engines, precision: str):
    """The chosen row's estimate at another precision (None when the strategy does not run there)."""
    o = chosen.option
    w = replace(o.workload, precision=precision)
    found = engines.estimate_all(model, w, o.placement, (chosen.estimate.strategy,), request.headroom)
    return found[0] if found else None


def precision_reasons(model: ModelSpec, request: PlanRequest, chosen: Row, engines: Engines) -> list[str]:
    """For an fp8 plan: the fp8 row against the same configuration in bf16 (goes into the config header)."""
    if request.precision != "fp8":
        return []
    tps = chosen.estimate.tokens_per_s_per_gpu
    bf16 = _same_row_at(model, request, chosen, engines, "bf16")
    versus = f" vs {bf16.tokens_per_s_per_gpu:,.0f} in bf16 ({tps / bf16.tokens_per_s_per_gpu:.2f}x)" if bf16 else ""
    return [
        f"precision fp8 (--precision fp8: train.py converts the decoder's Linear layers to torchao float8, lm_head, "
        f"embedding, norms and attention stay bf16): {tps:,.0f} tokens/s/GPU{versus}, MFU in bf16-equivalent FLOPs; "
        f"{UNMEASURED}"
    ]


def fp8_lever(model: ModelSpec, request: PlanRequest, chosen: Row, engines: Engines) -> list[str]:
    """For a bf16 plan: what fp8 is predicted to gain on this GPU, or why it is not offered (Plan.levers)."""
    if request.precision != "bf16":
        return []
    gpu = chosen.option.placement.gpu_name
    if not fp8_supported(gpu):
        return [f"fp8 not offered: {fp8_refusal(gpu).split(': ', 1)[1].split(';')[0]}"]
    fp8 = _same_row_at(model, request, chosen, engines, "fp8")
    if fp8 is None:
        return []
    tps = chosen.estimate.tokens_per_s_per_gpu
    ratio = fp8.tokens_per_s_per_gpu / tps if tps else 0.0
    fits = "" if fp8.fits else f", but needs {fp8.reserved_gb:.1f} GB > {fp8.capacity_gb:.1f} GB usable"
    return [
        f"fp8 not chosen by default: with --precision fp8 (torchao float8 Linears) this configuration is predicted "
        f"{ratio - 1:+.0%} tokens/s ({fp8.tokens_per_s_per_gpu:,.0f}/GPU, {ratio:.2f}x bf16{fits}); {UNMEASURED}"
    ]
