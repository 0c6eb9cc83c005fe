"""The plan's reasons, in plain words with numbers: which GPUs and why, what fits, what was rejected, what the wire
costs. Every number here is a prediction of the estimator unless the bandwidth file measured it."""

from __future__ import annotations

from generator.catalog import strategies as catalog
from generator.estimate.types import Estimate, Workload
from generator.model.types import ModelSpec
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
    """Every other strategy on the chosen GPUs and batch setting (the table's rows), compared with the choice only
    where it fits; a faster one is called faster, never a tie, and the tie-break is given only where it decided."""
    e = chosen.estimate
    forced = request.strategy != "auto"
    out = []
    for other in chosen.option.estimates:
        if other.strategy == e.strategy:
            continue
        if not other.fits:
            out.append(
                f"{other.strategy} rejected: needs {other.reserved_gb:.1f} GB > {other.capacity_gb:.1f} GB usable"
            )
            continue
        if not forced and other.strategy in OFFLOAD and not request.allow_offload:
            out.append(f"{other.strategy} not considered: CPU offload is off (--allow-offload to consider it)")
            continue
        tps, mine = other.tokens_per_s_per_gpu, max(e.tokens_per_s_per_gpu, 1e-9)
        fits = f"{other.strategy} fits ({other.reserved_gb:.1f} GB)"
        if tps > mine and min(tps, mine) < (1 - TIE_TOLERANCE) * max(tps, mine):  # only when --strategy forced it
            out.append(f"{fits} and is predicted {tps / mine - 1:.0%} faster")
            continue
        if min(tps, mine) < (1 - TIE_TOLERANCE) * max(tps, mine):
            out.append(f"{fits} but is predicted {1 - tps / mine:.0%} slower")
            continue
        if forced:
            out.append(f"{fits} and ties on speed ({tps:,.0f} tokens/s per GPU); you asked for {e.strategy}")
            continue
        extra = other.reserved_gb - e.reserved_gb  # both in the table: the difference of its reserved column
        mem = f"{extra:+.1f} GB per GPU" if abs(extra) >= 0.05 else "the same memory"
        line = f"{other.strategy} fits and ties on speed ({tps:,.0f} tokens/s per GPU) with {mem}"
        if tie_rank(other.strategy) > tie_rank(e.strategy):
            line += f"; on a tie {e.strategy} is preferred ({TIE_WHY[tie_rank(e.strategy)]})"
        out.append(line)
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


def versus_auto(request: PlanRequest, chosen: Row, auto: Row | None, rows: list[Row]) -> list[str]:
    """What --strategy auto would have chosen instead of the strategy the user named, with its own numbers (they are
    not in the table when its GPUs or batch differ), and what forcing the strategy changed: GPU count, batch."""
    e = chosen.estimate
    if auto is None or auto.estimate.strategy == e.strategy and auto.option == chosen.option:
        return []
    a = auto.estimate
    gain = auto.total_tps / max(chosen.total_tps, 1e-9) - 1
    where = (
        "its row in the table above"
        if auto.option == chosen.option
        else f"not in the table above, which shows micro-batch {chosen.option.batch.micro_batch} on "
        f"{chosen.num_gpus} GPU{'s' * (chosen.num_gpus != 1)}; run without --strategy to see it"
    )
    out = [
        f"you asked for {e.strategy}; --strategy auto would pick {a.strategy} on {auto.num_gpus} GPUs at "
        f"{setting(auto)}: predicted {a.tokens_per_s_per_gpu:,.0f} tokens/s per GPU, {auto.total_tps:,.0f} in total "
        f"against {chosen.total_tps:,.0f} here ({gain:+.0%}), {a.reserved_gb:.1f} GB per GPU ({where})"
    ]
    if chosen.num_gpus != auto.num_gpus:
        out.append(count_change(chosen, auto, rows))
    if setting(chosen) != setting(auto):
        out.append(batch_change(request, chosen, auto, rows))
    return out


def setting(row: Row) -> str:
    b = row.option.batch
    ckpt = "on" if b.grad_checkpointing else "off"
    accum = f" x {b.grad_accum} accumulation steps" if b.grad_accum != 1 else ""
    return f"micro-batch {b.micro_batch}{accum}, checkpointing {ckpt}, global batch {b.global_batch}"


def count_change(chosen: Row, auto: Row, rows: list[Row]) -> str:
    """Why the named strategy runs on another GPU count than auto's choice."""
    s, n = chosen.estimate.strategy, chosen.num_gpus
    head = f"{s} on {n} GPU{'s' * (n != 1)} where auto's {auto.estimate.strategy} uses {auto.num_gpus}"
    if not chosen.estimate.fits:
        return f"{head}: it fits on no GPU count, so the plan takes every GPU it may use at the least memory"
    mine = [r for r in rows if r.estimate.strategy == s]
    if n < auto.num_gpus and not any(r.estimate.fits for r in mine if r.num_gpus > n):
        above = [r for r in mine if r.num_gpus > n]
        if not above:
            return f"{head}: {s} cannot run on more GPUs here (see 'not applicable')"
        least = min(above, key=lambda r: (r.num_gpus, r.estimate.reserved_gb))
        least = min((r for r in above if r.num_gpus == least.num_gpus), key=lambda r: r.estimate.reserved_gb)
        le = least.estimate
        return (
            f"{head}: {s} fits on at most {n} GPU{'s' * (n != 1)} here; on {least.num_gpus} GPUs even its leanest "
            f"setting ({setting(least)}) needs {le.reserved_gb:.1f} GB > {le.capacity_gb:.1f} GB usable"
        )
    return f"{head}: the GPU count that is best for {s} (predicted total tokens/s by GPU count, above)"


def batch_change(request: PlanRequest, chosen: Row, auto: Row, rows: list[Row]) -> str:
    """Why the named strategy runs at another micro-batch, accumulation or checkpointing than auto's choice."""
    s, b = chosen.estimate.strategy, chosen.option.batch
    head = f"{setting(chosen)}, where auto's plan has {setting(auto)}"
    if not chosen.estimate.fits:
        why = f"the least memory {s} can run with, and it still does not fit"
    else:
        same = [r for r in rows if r.estimate.strategy == s and r.option.choice == chosen.option.choice]
        biggest = max((r.option.batch.micro_batch for r in same if r.estimate.fits), default=b.micro_batch)
        why = f"the fastest setting that fits {s} on these GPUs" + (
            f" (micro-batch {b.micro_batch} is the largest that fits)" if b.micro_batch == biggest else ""
        )
    if request.global_batch is None and b.global_batch != auto.option.batch.global_batch:
        why += (
            f"; with no --global-batch the global batch is micro-batch x GPUs, so it changed too "
            f"(--global-batch {auto.option.batch.global_batch} keeps auto's, through accumulation)"
        )
    return f"{head}: {why}"


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


HOST_SPREAD = (
    "the same cell ran 1.56x apart on two leases of one H200 kind: Qwen2.5-7B LoRA at 2,048 x 1, 7,228 and 11,292 "
    "tokens/s (bench/REPORT.md)"
)
"""How far a host-bound step moved between machines of one kind, measured: why such a prediction is the least sure."""


def host_bound_reason(e: Estimate, workload: Workload, model: ModelSpec) -> list[str]:
    """One line where the chosen step is host-bound: the CPU issuing the kernels, not the GPU, sets its speed; where
    train.py's layers run eager, compiling them issues fewer kernels (the plan's compile line says why it did not);
    where the host was priced from the Mistral layer's rows, how to time this model's own."""
    if not e.host_bound:
        return []
    eager = workload.script == "train.py" and not workload.layers_compiled
    compiled = "; compiled layers (--compile-layers) issue fewer kernels a layer" if eager else ""
    probe, own = "`probe --compute`", ""
    if e.host_as_mistral:
        probe = f"`probe --compute --model {model.name}`"
        counted = model.layer_ops is not None and not workload.layers_compiled
        scaled = " at the ratio of the ops its layer dispatches" if counted else ""
        own = f" (its host priced from the Mistral layer's rows{scaled}; that times this model's own layer)"
    last = f", then clipping and the optimizer's update, issued last, run {e.tail_s:.2f} s" if e.tail_s >= 0.005 else ""
    return [
        f"host-bound: issuing the kernels takes the CPU {e.host_s:.2f} s a step against {e.gpu_work_s:.2f} s of GPU "
        f"work, so this machine's CPU sets the step{last} ({HOST_SPREAD}); longer sequences or a larger micro-batch "
        f"give the GPU more per kernel{compiled}, and {probe} on the training machine measures its own host{own}"
    ]
