"""Tensor and context parallelism in the plan: which layouts may run, which the planner takes, and why.

Rules (all sizes predicted, never measured yet):
- Only FSDP2 composes them (accelerate 1.15 `parallelism_config`); QLoRA, fp8, forced non-FSDP strategies skip them.
- tp and cp divide the GPUs of one machine, tp divides the attention and key/value heads; accelerate refuses FSDP2
  with nothing to shard across (dp_shard = cp = 1), so TP over every GPU is refused too.
- Every TP group and every CP group lies inside one NVLink island: TP all-reduces inside every layer and CP passes
  keys and values at every layer, so a group across PCIe or the CPU sockets would run each layer at that link's speed.
- A layout is taken when it fits where no data-parallel option does, or when it is predicted at least MIN_GAIN faster
  than the data-parallel choice (the TP/CP terms are unmeasured, so a small predicted gain is not enough).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from generator.errors import UserError
from generator.estimate.parallel import Layout, estimate_layout
from generator.plan.batch import batch_options
from generator.plan.candidates import placement_for
from generator.plan.parallel_layout import ParallelGroups
from generator.plan.policy import pick
from generator.plan.rows import Option, Row
from generator.plan.types import PlanRequest
from generator.topology.islands import islands

MIN_GAIN = 0.05
"""Predicted speed-up over the data-parallel choice a TP/CP layout must show to be taken."""


@dataclass(frozen=True)
class Candidate:
    """One layout and batch setting, estimated."""

    row: Row
    """The estimate on the whole job's GPUs (strategy fsdp)."""
    groups: ParallelGroups
    """The layout placed on GPUs."""


@dataclass(frozen=True)
class Considered:
    candidates: tuple[Candidate, ...] = ()
    """Every layout that may run here, with each batch setting."""
    refused: tuple[str, ...] = ()
    """One line per layout that may not, and why (the island lines first)."""


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def skip_reason(request: PlanRequest, model) -> str | None:
    """Why no TP/CP layout is considered at all for this request (None: they are)."""
    if request.strategy not in ("auto", "fsdp"):
        return f"--strategy {request.strategy}: tensor/context parallel compose only with FSDP2"
    if request.method == "qlora":
        return "QLoRA runs under DDP only"
    if request.precision == "fp8":
        return "fp8 is planned under DDP only"
    if model.num_experts:
        return "mixture-of-experts layers have no tensor-parallel plan here"
    return None


def forced(request: PlanRequest) -> bool:
    """--tp-size or --cp-size above 1: the user wants that layout."""
    return (request.tp_size or 1) > 1 or (request.cp_size or 1) > 1


def _wanted(request: PlanRequest, tp: int, cp: int) -> bool:
    return request.tp_size in (None, tp) and request.cp_size in (None, cp)


def consider(topology, model, request: PlanRequest, choice, inter, engines, template, measured=None) -> Considered:
    """Every (tp, cp) layout over `choice` (the largest GPU choice) that may run, estimated per batch setting.
    `measured`: bus bandwidths from `probe` ({frozenset(ids): GB/s}), used for a group wherever it was measured."""
    for flag, size in (("--tp-size", request.tp_size), ("--cp-size", request.cp_size)):
        if size is not None and size < 1:
            raise UserError(f"{flag} must be at least 1, got {size}")
    skip = skip_reason(request, model)
    if forced(request) and skip:
        raise UserError(f"--tp-size/--cp-size cannot apply: {skip}")
    if skip or len(choice.gpu_ids) * request.num_machines < 2:
        return Considered()
    engines = _cached(engines, measured or {})
    gpu_ids, local = tuple(choice.hsdp_ids), len(choice.hsdp_ids)
    island_of = {g: i for i, isl in enumerate(islands(topology)) for g in isl if len(isl) > 1}
    placement = placement_for(choice, topology, request, inter)
    candidates, island_lines, other_lines = [], [], []
    for tp in _divisors(local):
        for cp in _divisors(local // tp):
            if tp == cp == 1 or not _wanted(request, tp, cp):
                continue
            layout = Layout(tp=tp, cp=cp, dp_shard=local * request.num_machines // (tp * cp))
            groups = ParallelGroups(layout, gpu_ids, request.num_machines)
            why = _refusal(model, request, layout)
            if why:
                other_lines.append(f"{layout.label} not considered: {why}")
                continue
            straddle = _straddle(topology, engines, groups, island_of)
            if straddle:
                island_lines.append(f"{layout.label} not considered: {straddle}")
                continue
            groups = replace(groups, layout=_priced(topology, engines, groups, inter))
            candidates += _estimates(model, request, choice, placement, groups, template)
    return Considered(tuple(candidates), tuple(dict.fromkeys(island_lines + other_lines)))


def _cached(engines, measured: dict):
    """The engines with subset_busbw memoised (layouts share their groups, and each predicted bandwidth costs ms),
    a measured value first where the bandwidth file has the group."""
    seen: dict = {}

    def busbw(topology, ids):
        key = tuple(ids)
        if key not in seen:
            seen[key] = measured.get(frozenset(key)) or engines.subset_busbw(topology, key)
        return seen[key]

    return replace(engines, subset_busbw=busbw)


def _refusal(model, request: PlanRequest, layout: Layout) -> str | None:
    if layout.tp > 1 and (model.num_kv_heads % layout.tp or model.num_heads % layout.tp):
        return f"{layout.tp} does not divide the model's {model.num_kv_heads} key/value heads"
    if layout.dp_shard * layout.cp == 1:
        return "it leaves FSDP2 nothing to shard across (accelerate 1.15 refuses dp_shard = cp = 1)"
    if layout.cp > 1:
        window = model.sliding_window or (model.partial_window or (0, 0))[1]
        if window:  # accelerate's CP hook drops the mask and refuses windowed models
            return f"context parallel drops the attention mask, and this model's {window}-token window needs one"
        if request.attention == "flex":
            return "context parallel runs SDPA only (--attention flex asked)"
        if request.seq_len % (2 * layout.cp):
            return f"--seq-len {request.seq_len} does not split into {2 * layout.cp} equal chunks (load balancing)"
    return None


def _straddle(topology, engines, groups: ParallelGroups, island_of: dict[int, int]) -> str | None:
    """Why a TP or CP group of this layout leaves its NVLink island (None when every group stays inside one)."""
    lay = groups.layout
    tp = groups.tp_rank_groups if lay.tp > 1 else ()
    cp = groups.cp_rank_groups if lay.cp > 1 else ()
    for kind, rank_groups, what in (
        ("tensor parallel", tp, "all-reduces inside every layer"),
        ("context parallel", cp, "passes keys and values at every layer"),
    ):
        for ranks in rank_groups:
            ids = groups.gpus(ranks)
            owners = {island_of.get(g) for g in ids}
            if None not in owners and len(owners) == 1:
                continue
            a, b = _crossing(ids, island_of)
            link = topology.link(a, b).kind
            across = engines.subset_busbw(topology, ids)
            inside = _island_busbw(topology, engines, ids, island_of)
            largest = max((sum(1 for i in island_of.values() if i == k) for k in set(island_of.values())), default=1)
            versus = (
                f" against {inside:.0f} GB/s inside one island"
                if inside
                else f"; no NVLink island here holds {len(ids)} GPUs, the largest {largest}"
                if island_of
                else "; these GPUs have no NVLink"
            )
            return (
                f"its {kind} group GPUs {','.join(map(str, ids))} would cross {link} between GPUs {a} and {b} "
                f"({across:.0f} GB/s{versus}); {kind} {what}"
            )
    return None


def _crossing(ids, island_of) -> tuple[int, int]:
    """Two GPUs of the group in different islands (a GPU without NVLink is an island of its own)."""
    key = {g: island_of.get(g, -1 - g) for g in ids}
    return next(((a, b) for a in ids for b in ids if a < b and key[a] != key[b]), (ids[0], ids[1]))


def _island_busbw(topology, engines, ids, island_of) -> float:
    """Bandwidth of as many GPUs as the group inside the first GPU's island, when the island is big enough."""
    isl = [g for g, i in island_of.items() if i == island_of.get(ids[0])]
    return engines.subset_busbw(topology, tuple(sorted(isl))[: len(ids)]) if len(isl) >= len(ids) else 0.0


def _bw(topology, engines, ids) -> float:
    bw = engines.subset_busbw(topology, tuple(ids)) if len(set(ids)) > 1 else 0.0
    return 0.0 if math.isinf(bw) else float(bw)


def _priced(topology, engines, groups: ParallelGroups, inter) -> Layout:
    """The layout with the bandwidth of its slowest TP, CP and FSDP groups (nccl-tests all-reduce bus bandwidth)."""
    lay = groups.layout
    tp_bw = min((_bw(topology, engines, g) for g in groups.tp_groups), default=0.0)
    cp_bw = min((_bw(topology, engines, g) for g in groups.cp_groups), default=0.0)
    first = groups.fsdp_rank_groups[0]
    fsdp_bw = _bw(topology, engines, sorted(set(groups.gpus(first))))
    if len(groups.machines(first)) > 1:
        fsdp_bw = min(fsdp_bw, inter or 0.0) if fsdp_bw else (inter or 0.0)
    return replace(lay, tp_busbw_gbps=tp_bw, cp_busbw_gbps=cp_bw, fsdp_busbw_gbps=fsdp_bw)


def _estimates(model, request, choice, placement, groups: ParallelGroups, template) -> list[Candidate]:
    lay = groups.layout
    batches, _ = batch_options(request, lay.data_parallel)
    out = []
    for batch in batches:
        workload = replace(
            template,
            micro_batch=batch.micro_batch,
            grad_accum=batch.grad_accum,
            grad_checkpointing=batch.grad_checkpointing,
            # CP runs SDPA's causal kernel over the whole packed sequence (no document mask: torch's ring attention
            # takes none); Liger's kernels are not checked on DTensor shards, so neither lever is taken with TP/CP.
            attention="sdpa" if lay.cp > 1 else template.attention,
            doc_tokens=None if lay.cp > 1 else template.doc_tokens,
            liger=False,
            precision="bf16",
        )
        e = estimate_layout(model, workload, placement, lay, request.headroom)
        option = Option(choice, placement, batch, workload, (e,), ())
        out.append(Candidate(Row(option, e), groups))
    return out


def choose(
    considered: Considered, plain_rows: list[Row], plain_best: Row | None, request: PlanRequest | None = None
) -> tuple[Candidate | None, str]:
    """The layout the plan takes (or None) and the one line that says why, with the numbers."""
    fit = [c for c in considered.candidates if c.row.estimate.fits]
    if request is not None and forced(request):
        return _forced(request, considered, fit)
    if not fit:
        return None, ""
    row = pick([c.row for c in fit])
    best = next(c for c in fit if c.row is row)
    e, lay = row.estimate, best.groups.layout
    head = f"{lay.label} on GPUs {','.join(map(str, best.groups.gpu_ids))}: {_how(row, lay)}"
    tps = f"predicted {e.tokens_per_s_per_gpu:,.0f} tokens/s per GPU"
    if plain_best is None:
        lean = min(plain_rows, key=lambda r: r.estimate.reserved_gb, default=None)
        versus = (
            f" where the leanest data-parallel option, {lean.estimate.strategy}, needs {lean.estimate.reserved_gb:.1f}"
            if lean
            else ""
        )
        return best, f"{head}; {e.reserved_gb:.1f} GB per GPU fits in {e.capacity_gb:.1f}{versus} ({tps})"
    p = plain_best.estimate
    if row.total_tps < (1 + MIN_GAIN) * plain_best.total_tps:
        return None, (
            f"tensor/context parallel not taken: the best layout, {lay.label}, is {tps} against "
            f"{p.tokens_per_s_per_gpu:,.0f} for {p.strategy}: a layout is taken only when {MIN_GAIN:.0%} faster or more"
        )
    gain = row.total_tps / plain_best.total_tps - 1
    return best, (
        f"{head}; {tps} against {p.tokens_per_s_per_gpu:,.0f} for {p.strategy} ({gain:.0%} faster, "
        f"{e.reserved_gb:.1f} GB per GPU)"
    )


def _forced(request: PlanRequest, considered: Considered, fit: list[Candidate]) -> tuple[Candidate, str]:
    asked = " ".join(f"{f} {v}" for f, v in (("--tp-size", request.tp_size), ("--cp-size", request.cp_size)) if v)
    if not fit:
        lean = min(considered.candidates, key=lambda c: c.row.estimate.reserved_gb, default=None)
        why = (
            f"the leanest, {lean.groups.layout.label}, needs {lean.row.estimate.reserved_gb:.1f} GB per GPU > "
            f"{lean.row.estimate.capacity_gb:.1f} GB usable"
            if lean
            else "; ".join(considered.refused[:2]) or "no such layout divides these GPUs"
        )
        verb = "fits" if lean else "can run"
        raise UserError(f"{asked}: no layout with those sizes {verb} here: {why}")
    row = pick([c.row for c in fit])
    best = next(c for c in fit if c.row is row)
    e = row.estimate
    return best, (
        f"{best.groups.layout.label} on GPUs {','.join(map(str, best.groups.gpu_ids))}, forced by {asked}: "
        f"{_how(row, best.groups.layout)}; {e.reserved_gb:.1f} GB per GPU, predicted "
        f"{e.tokens_per_s_per_gpu:,.0f} tokens/s per GPU"
    )


def _how(row: Row, lay: Layout) -> str:
    parts = []
    if lay.tp > 1:
        parts.append(f"each layer's heads and MLP split over {lay.tp} GPUs of one NVLink island")
    if lay.cp > 1:
        s = row.option.workload.seq_len
        parts.append(f"the {s:,}-token sequence split into {s // lay.cp:,} per GPU inside one NVLink island")
    return " and ".join(parts)


def nothing_fits_note(considered: Considered, plain_rows: list[Row]) -> str:
    """What TP/CP could and could not do, for the "does not fit" error (empty when they change nothing)."""
    lean_plain = min((r.estimate.reserved_gb for r in plain_rows), default=math.inf)
    lean = min(considered.candidates, key=lambda c: c.row.estimate.reserved_gb, default=None)
    if lean is None or lean.row.estimate.reserved_gb > 0.9 * lean_plain:
        return ""
    e = lean.row.estimate
    note = f" Tensor/context parallel: the leanest layout, {lean.groups.layout.label}, needs {e.reserved_gb:.1f} GB"
    return note + "".join(f"; {line}" for line in considered.refused[:2])
