"""When nothing fits: say what would, with the estimator's numbers (LoRA, QLoRA, offload, bf16 load, shorter
sequences, more GPUs or machines). Each alternative is priced on the largest placement the user allowed, with
checkpointing on and the smallest micro-batch, i.e. the leanest setting of the request."""

from __future__ import annotations

from dataclasses import replace

from generator.estimate.types import STRATEGIES
from generator.plan.fabrics import DEFAULT_FABRIC, FABRICS
from generator.plan.policy import OFFLOAD, allowed_strategies
from generator.plan.rows import Option, Row
from generator.plan.usable import usable_memory_text

MIN_SEQ_LEN = 256
"""Shorter sequences than this are not worth suggesting for fine-tuning."""


def nothing_fits(model, request, options: list[Option], rows: list[Row], engines, more_gpus=None) -> str:
    """One line: what the request needs, and what would fit instead. `more_gpus` is a Placement using every free
    GPU when the user asked for fewer."""
    lean = min(rows or [], key=lambda r: r.estimate.reserved_gb, default=None)
    base = max(options, key=lambda o: (o.placement.num_gpus, o.batch.grad_checkpointing, -o.batch.micro_batch))
    p, wl = base.placement, base.workload
    where = f"{p.num_gpus}x {p.gpu_name} ({p.gpu_memory_gb:g} GB)"
    if p.num_machines > 1:
        where += f" over {p.num_machines} machines"
    head = f"{request.method} fine-tune of {model.name} at --seq-len {request.seq_len} does not fit on {where}"
    if lean is not None:
        e = lean.estimate
        head += (
            f": the leanest option, {e.strategy}, needs {e.reserved_gb:.1f} GB per GPU > {e.capacity_gb:.1f} GB usable"
            f" ({usable_memory_text(p.gpu_memory_gb, request.headroom, p.num_gpus)})"
        )

    allowed = allowed_strategies(request)
    tries: list[tuple[str, object, object, tuple[str, ...]]] = []
    if request.method == "full":
        tries.append(("--method lora", replace(wl, method="lora"), p, allowed))
    if request.method in ("full", "lora"):
        tries.append(("--method qlora", replace(wl, method="qlora"), p, allowed))
    if not request.allow_offload and request.strategy == "auto":
        tries.append(("--allow-offload", wl, p, OFFLOAD))
    if wl.load_dtype == "fp32":
        tries.append(("--load-dtype bf16", replace(wl, load_dtype="bf16"), p, allowed))
    # Never suggest a length the model has no positions for: start at its limit when the request is beyond it.
    limit = model.max_seq_len
    seq = limit if limit and request.seq_len > limit else request.seq_len // 2
    while seq >= MIN_SEQ_LEN:
        tries.append((f"--seq-len {seq}", replace(wl, seq_len=seq), p, allowed))
        seq //= 2
    if more_gpus is not None:
        tries.append((f"--num-gpus {more_gpus.num_gpus_per_machine}", wl, more_gpus, allowed))
    for machines in (2 * p.num_machines, 4 * p.num_machines):
        bigger = replace(p, num_machines=machines, inter_node_gbps=p.inter_node_gbps or _assumed_inter_node())
        tries.append((f"--num-machines {machines}", wl, bigger, allowed))

    found, seen_seq = [], False
    for label, workload, placement, strategies in tries:
        if label.startswith("--seq-len") and seen_seq:
            continue  # only the longest sequence that fits is worth saying
        best = _best_fitting(model, workload, placement, strategies, request.headroom, engines)
        if best is None:
            continue
        seen_seq = seen_seq or label.startswith("--seq-len")
        found.append(
            f"{label} ({best.strategy}, {best.reserved_gb:.1f} GB per GPU, "
            f"predicted {best.tokens_per_s_per_gpu:,.0f} tokens/s per GPU)"
        )
        if label.startswith("--num-machines"):
            break  # the smallest cluster that fits is enough
    if not found:
        return f"{head}; nothing tried fits (LoRA, QLoRA, offload, shorter sequences, more machines)"
    return f"{head}. What would fit: " + "; ".join(found)


def _best_fitting(model, workload, placement, strategies, headroom, engines):
    runnable = tuple(s for s in STRATEGIES if s in strategies and engines.applicable(s, workload, placement) is None)
    if not runnable:
        return None
    estimates = engines.estimate_all(model, workload, placement, strategies=runnable, headroom=headroom)
    fitting = [e for e in estimates if e.fits]
    return max(fitting, key=lambda e: e.tokens_per_s_per_gpu, default=None)


def _assumed_inter_node() -> float:
    return FABRICS[DEFAULT_FABRIC].busbw_gbps
