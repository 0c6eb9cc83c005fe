"""Trial every candidate in turn, pick the one that measured fastest, and describe the result: the header section
for the written config, the calibration records, and the lines printed to the user."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from generator.plan.types import Plan
from generator.trial.runner import TrialOptions, TrialResult, has_weights, run_trial


def run_trials(
    plans: list[Plan], opts: TrialOptions, say: Callable[[str], None] = print, workdir: str | None = None
) -> list[TrialResult]:
    """Each candidate in order; an out-of-memory or failed trial is reported and the next one still runs."""
    results = []
    with tempfile.TemporaryDirectory(prefix="dcg-trial-", dir=workdir) as tmp:
        for i, plan in enumerate(plans, 1):
            say(f"trial {i}/{len(plans)}: {describe(plan)} ...")
            result = run_trial(plan, opts, Path(tmp), f"cand{i}")
            say(f"  {outcome(result)}")
            results.append(result)
    return results


def fastest(results: list[TrialResult]) -> TrialResult | None:
    """Highest measured total throughput (tokens/s per GPU x GPUs: candidates may use different GPU counts)."""
    ok = [r for r in results if r.status == "ok" and r.measured]
    return max(ok, key=lambda r: r.measured.tokens_per_s_per_gpu * r.plan.num_processes, default=None)


def describe(plan: Plan) -> str:
    w = plan.workload
    ids = ",".join(str(i) for i in plan.gpu_ids)
    ckpt = "on" if w.grad_checkpointing else "off"
    return f"{plan.strategy} on GPUs {ids}, micro-batch {w.micro_batch} x accum {w.grad_accum}, checkpointing {ckpt}"


def outcome(r: TrialResult) -> str:
    e = r.plan.estimate
    predicted = f"predicted {e.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, {e.step_s:.2f} s/step, {e.reserved_gb:.1f} GB"
    if r.status == "oom":
        return f"does not fit (measured): out of memory ({predicted})"
    if r.status != "ok" or r.measured is None:
        return f"{r.status}: {r.detail} ({predicted})"
    m = r.measured
    mem = f", {m.peak_reserved_gb:.1f} GB reserved" if m.peak_reserved_gb is not None else ""
    steady = m.steps - m.warmup
    return (
        f"measured {m.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, {m.step_s:.3f} s/step{mem} (median of {steady} steps "
        f"after {m.warmup} warm-up); {predicted}"
    )


def header_notes(results: list[TrialResult], best: TrialResult, opts: TrialOptions) -> list[str]:
    """The "Trial" section of the written config's header: measured next to predicted for every candidate."""
    where = (
        "on CPU (each trial config adapted: use_cpu true, mixed precision no; CPU speed says nothing about GPU "
        "speed, and the config written here is the GPU plan's)"
        if opts.device == "cpu"
        else "on this machine's GPUs"
    )
    if opts.model_dir and has_weights(opts.model_dir):
        data = f"model {opts.model_dir}"
    elif opts.model_dir:
        data = f"the architecture in {opts.model_dir} with random weights (no weight files there)"
    else:
        data = "the model's architecture with random weights (--init random)"
    data += f", data {opts.dataset}" if opts.dataset else ", synthetic text"
    lines = [
        f"Trial (measured, python -m generator plan --trial): {len(results)} candidate(s) run {where} with {data}; "
        f"this one measured fastest{'' if best is results[0] else ' (the planner predicted another first)'}.",
    ]
    for i, r in enumerate(results, 1):
        mark = " <- written" if r is best else ""
        lines.append(f"  - {i}. {describe(r.plan)}: {outcome(r)}{mark}")
    return lines


RECORDED = ("ok", "oom")
"""Trial outcomes that are measurements (speed, or "does not fit"); a failed or skipped trial measured nothing."""


def calibration_records(results: list[TrialResult], opts: TrialOptions) -> list[dict]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    out = []
    for r in results:
        if r.status not in RECORDED:
            continue
        p, e, m, w = r.plan, r.plan.estimate, r.measured, r.plan.workload
        out.append(
            {
                "time": now,
                "device": opts.device,
                "gpu_name": p.gpu_name,
                "machine": p.machine,
                "model": p.model.name,
                "strategy": p.strategy,
                "num_processes": p.num_processes,
                "gpu_ids": list(p.gpu_ids),
                "method": w.method,
                "seq_len": w.seq_len,
                "micro_batch": w.micro_batch,
                "grad_accum": w.grad_accum,
                "grad_checkpointing": w.grad_checkpointing,
                "attention": w.attention,
                "liger": w.liger,
                "script": w.script,
                "status": r.status,
                "detail": r.detail,
                "predicted_tokens_per_s_per_gpu": e.tokens_per_s_per_gpu,
                "predicted_step_s": e.step_s,
                "predicted_reserved_gb": e.reserved_gb,
                "measured_tokens_per_s_per_gpu": m.tokens_per_s_per_gpu if m else None,
                "measured_step_s": m.step_s if m else None,
                "measured_peak_reserved_gb": m.peak_reserved_gb if m else None,
                "measured_steps": m.steps if m else 0,
            }
        )
    return out
