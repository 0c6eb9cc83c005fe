"""The plan's reasons, in plain words with numbers: which GPUs and why, what fits, what was rejected, what the wire
costs. Every number here is a prediction of the estimator unless the bandwidth file measured it."""

from __future__ import annotations

from generator.catalog import strategies as catalog
from generator.estimate.types import Estimate
from generator.plan.policy import OFFLOAD, TIE_TOLERANCE, TIE_WHY, tie_rank
from generator.plan.rows import Row
from generator.plan.types import PlanRequest


def explain(
    request: PlanRequest, chosen: Row, fitting: list[Row], rows: list[Row], inter: str, tol: float
) -> list[str]:
    o, e = chosen.option, chosen.estimate
    out = [gpus_reason(request, chosen)]
    if request.num_gpus is None and len({r.num_gpus for r in fitting}) > 1:
        out.append(count_reason(chosen, fitting, tol))
    out.append(strategy_reason(request, o.placement, e))
    out.extend(other_strategies(request, chosen))
    out.append(wire_reason(chosen, inter))
    out.append(checkpointing_reason(request, chosen, rows))
    b = o.batch
    asked = " (accumulation keeps the global batch you asked for)" if request.global_batch is not None else ""
    out.append(
        f"global batch {b.global_batch} = micro-batch {b.micro_batch} x {o.placement.num_gpus} GPUs x "
        f"{b.grad_accum} accumulation step{'s' if b.grad_accum != 1 else ''}{asked}"
    )
    if catalog.strategy(e.strategy).hybrid:
        shard = o.choice.shard_size
        out.append(
            f"HSDP: {o.placement.num_gpus // shard} replicas of {shard}-GPU shard groups; parameters are sharded "
            "inside each NVLink island or machine and only the gradient all-reduce crosses the slower link"
        )
    return out


def gpus_reason(request: PlanRequest, chosen: Row) -> str:
    c = chosen.option.choice
    text = c.reason if c.reason.startswith("GPU") else f"GPUs {format_ids(c.gpu_ids)}: {c.reason}"
    if request.num_machines > 1:
        text += f" (the same GPUs on each of {request.num_machines} machines)"
    return f"{text}; measured all-reduce busbw {c.busbw_gbps:g} GB/s" if c.measured else text


def count_reason(chosen: Row, fitting: list[Row], tol: float) -> str:
    best: dict[int, float] = {}
    for r in fitting:
        best[r.num_gpus] = max(best.get(r.num_gpus, 0.0), r.total_tps)
    table = ", ".join(f"{n}: {tps:,.0f}" for n, tps in sorted(best.items()))
    top = max(best.values())
    if chosen.num_gpus == max(best):
        why = "the most GPUs that fit, and each count adds throughput"
        if best[chosen.num_gpus] < top:
            why = "fastest"
    else:
        why = f"more GPUs would add less than {tol:.0%} ({top / best[chosen.num_gpus] - 1:+.1%}), so the rest stay free"
    machines = chosen.option.placement.num_machines
    over = f" over all {machines} machines" if machines > 1 else ""
    return f"predicted total tokens/s by GPU count{over}: {table}; using {chosen.num_gpus}: {why}"


def strategy_reason(request: PlanRequest, placement, e: Estimate) -> str:
    mem = f"{e.reserved_gb:.1f} GB of {e.capacity_gb:.1f} GB usable per GPU ({placement.gpu_memory_gb:g} GB, " + (
        f"{request.headroom:.0%} kept free)"
    )
    verdict = "fits with" if e.fits else "does NOT fit:"
    return (
        f"{e.strategy} {verdict} {mem}; predicted {e.tokens_per_s_per_gpu:,.0f} tokens/s per GPU, "
        f"{e.step_s:.2f} s per step, MFU {e.mfu:.0%}"
    )


def other_strategies(request: PlanRequest, chosen: Row) -> list[str]:
    e = chosen.estimate
    out = []
    for other in chosen.option.estimates:
        if other.strategy == e.strategy:
            continue
        if not other.fits:
            out.append(
                f"{other.strategy} rejected: needs {other.reserved_gb:.1f} GB > {other.capacity_gb:.1f} GB usable"
            )
        elif request.strategy == "auto" and other.strategy in OFFLOAD and not request.allow_offload:
            out.append(f"{other.strategy} not considered: CPU offload is off (--allow-offload to consider it)")
        elif other.tokens_per_s_per_gpu >= (1 - TIE_TOLERANCE) * e.tokens_per_s_per_gpu:
            extra = other.reserved_gb - e.reserved_gb
            mem = f"{extra:+.1f} GB per GPU" if abs(extra) >= 0.05 else "the same memory"
            tps = other.tokens_per_s_per_gpu
            line = f"{other.strategy} fits and ties on speed ({tps:,.0f} tokens/s per GPU) with {mem}"
            if tie_rank(other.strategy) > tie_rank(e.strategy):
                line += f"; on a tie {e.strategy} is preferred ({TIE_WHY[tie_rank(e.strategy)]})"
            out.append(line)
        else:
            slower = 1 - other.tokens_per_s_per_gpu / max(e.tokens_per_s_per_gpu, 1e-9)
            out.append(f"{other.strategy} fits ({other.reserved_gb:.1f} GB) but is predicted {slower:.0%} slower")
    for strategy, why in chosen.option.not_applicable:
        out.append(f"{strategy} not applicable: {why}")
    return out


def wire_reason(chosen: Row, inter: str) -> str:
    e, p = chosen.estimate, chosen.option.placement
    if p.num_gpus == 1:
        return "wire: one GPU, no gradient communication"
    share = e.comm_s / e.step_s if e.step_s > 0 else 0.0
    text = (
        f"wire: {e.comm_gb_per_step:.1f} GB per GPU per step, {e.comm_s:.2f} s of communication against "
        f"{e.compute_s:.2f} s of compute ({share:.0%} of the {e.step_s:.2f} s step)"
    )
    return f"{text}; {inter}" if inter else text


def checkpointing_reason(request: PlanRequest, chosen: Row, rows: list[Row]) -> str:
    if request.grad_checkpointing != "auto":
        return f"activation checkpointing {request.grad_checkpointing} (as asked)"
    if not chosen.option.batch.grad_checkpointing:
        return "activation checkpointing off: it fits without it, saving the ~1/3 extra compute of recomputation"
    e = chosen.estimate
    off = [
        r.estimate
        for r in rows
        if r.estimate.strategy == e.strategy and r.num_gpus == chosen.num_gpus and not r.option.batch.grad_checkpointing
    ]
    if not off:
        return "activation checkpointing on"
    least = min(off, key=lambda x: x.reserved_gb)
    return (
        f"activation checkpointing on: without it {e.strategy} needs {least.reserved_gb:.1f} GB > "
        f"{least.capacity_gb:.1f} GB usable even at micro-batch 1"
        if not least.fits
        else "activation checkpointing on: turning it off fits only with a smaller micro-batch, which is slower"
    )


def versus_auto(chosen: Row, auto: Row | None) -> list[str]:
    """What --strategy auto would have chosen instead of the strategy the user named."""
    e = chosen.estimate
    if auto is None or auto.estimate.strategy == e.strategy and auto.num_gpus == chosen.num_gpus:
        return []
    gain = auto.total_tps / max(chosen.total_tps, 1e-9) - 1
    return [
        f"you asked for {e.strategy}; --strategy auto would pick {auto.estimate.strategy} on {auto.num_gpus} GPUs "
        f"({gain:+.0%} predicted total throughput, {auto.estimate.reserved_gb:.1f} GB per GPU)"
    ]


def forced_warning(e: Estimate) -> str:
    return (
        f"--strategy {e.strategy} does not fit: predicted {e.reserved_gb:.1f} GB reserved per GPU > "
        f"{e.capacity_gb:.1f} GB usable; expect out-of-memory (written only with --force)"
    )


def format_ids(ids) -> str:
    """0,1,2,3,6 -> "0-3,6"."""
    ids, parts = sorted(ids), []
    start = prev = None
    for i in [*ids, None]:
        if start is not None and i == prev + 1:
            prev = i
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}" if prev > start + 1 else f"{start},{prev}")
        start = prev = i
    return ",".join(parts)
