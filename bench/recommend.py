"""The planner's pick for each measured machine and workload, against the fastest measured configuration that fit.

"Fits" means what the planner promises: the measured peak reserved memory stays within the usable memory (the card
less the default 10% headroom and the memory outside the allocator). A cell that ran at 99% of the card ran, but a
longer run, another data order or a driver update can push it over, and the planner rightly refuses it."""

from __future__ import annotations

from dataclasses import dataclass

from bench.calibration import predict
from bench.row import MODEL, Row, bench_attention
from bench.wires import NVLINK
from generator.errors import UserError
from generator.model import load_model
from generator.plan.planner import make_plan
from generator.plan.types import PlanRequest
from generator.topology import load_machine

REFERENCE_MACHINE = "h200-sxm-2"
"""The bundled reference of the lent 2x H200 SXM NVSwitch machine (its captures are in shared/topo/)."""


@dataclass(frozen=True)
class Verdict:
    group: str
    """machine / GPUs / method / seq / micro-batch."""
    recommended: str
    """Strategy and checkpointing the planner picks, or why it picks nothing."""
    fastest: str
    """Fastest measured cell that ran within the usable memory, or '-'."""
    fastest_tps: float | None
    recommended_tps: float | None
    """Measured tokens/s of the recommended cell; None when it was not measured or did not run."""
    regret_pct: float | None
    status: str = "ok"
    """The recommended cell's status: ok | oom | error | not measured | no pick."""


def _cell(strategy: str, ckpt: bool) -> str:
    return f"{strategy} {'ckpt' if ckpt else 'no-ckpt'}"


def planner_pick(
    gpus: int,
    method: str,
    seq: int,
    mb: int,
    load: str,
    busbw: dict[int, float],
    liger: bool = False,
    flex: bool = False,
) -> tuple[str, bool]:
    request = PlanRequest(
        method=method,
        seq_len=seq,
        micro_batch=mb,
        global_batch=mb * gpus,
        num_gpus=gpus,
        load_dtype=load,
        liger=liger,
        compile_layers=False,  # the matrix ran eager layers: the verdict ranks what it measured
        **bench_attention(flex),
    )
    bandwidth = {frozenset(range(gpus)): busbw[gpus]} if gpus in busbw else None
    plan = make_plan(load_machine(REFERENCE_MACHINE), load_model(MODEL), request, bandwidth=bandwidth)
    return plan.strategy, plan.workload.grad_checkpointing


def fits_usable(row: Row, busbw: dict[int, float], wires: dict[str, dict[int, float]] | None = None) -> bool:
    """Measured peak reserved within the planner's usable memory for this row's GPUs."""
    return row.reserved_gb is not None and row.reserved_gb <= predict(row, busbw, wires).capacity_gb


def verdicts(
    rows: list[Row], busbw: dict[int, float], wires: dict[str, dict[int, float]] | None = None
) -> list[Verdict]:
    """One per (matrix file, GPUs, method, seq, micro-batch, load dtype, Liger, flex, wire) group of matrix cells;
    a slow wire's group is ranked against the planner's pick at that wire's measured busbw."""
    groups: dict[tuple, list[Row]] = {}
    for r in (r for r in rows if r.from_matrix and not r.unmodelled):
        key = (r.source, r.gpus, r.method, r.seq_len, r.micro_batch, r.load_dtype, r.liger, r.flex, r.wire)
        groups.setdefault(key, []).append(r)
    out = []
    for (source, gpus, method, seq, mb, load, liger, flex, wire), cells in sorted(groups.items()):
        name = f"{source.removesuffix('.json')} {gpus} GPU {method} s{seq} mb{mb} {load}"
        name += (" liger" if liger else "") + (" flex" if flex else "") + (f" {wire}" if wire != NVLINK else "")
        wire_busbw = (wires or {}).get(wire, {}) if wire != NVLINK else busbw
        ran = [c for c in cells if c.status == "ok" and c.tps and fits_usable(c, busbw, wires)]
        best = max(ran, key=lambda c: (c.tps, c.strategy, c.ckpt), default=None)
        try:
            strategy, ckpt = planner_pick(gpus, method, seq, mb, load, wire_busbw, liger, flex)
        except UserError as exc:
            fastest = _cell(best.strategy, best.ckpt) if best else "-"
            out.append(Verdict(name, f"none ({exc})", fastest, best and best.tps, None, None, "no pick"))
            continue
        mine = next((c for c in cells if c.strategy == strategy and c.ckpt == ckpt), None)
        tps = mine.tps if mine and mine.status == "ok" else None
        regret = 100.0 * (1 - tps / best.tps) if best and tps else None
        rec = (
            _cell(strategy, ckpt)
            + ("" if mine else " (not measured)")
            + (f" ({mine.status})" if mine and not tps else "")
        )
        status = mine.status if mine else "not measured"
        out.append(
            Verdict(name, rec, _cell(best.strategy, best.ckpt) if best else "-", best and best.tps, tps, regret, status)
        )
    return out
