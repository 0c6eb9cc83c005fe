"""Operator rates of one GPU, as `probe --compute` measures them (generator/probe/compute.py), and how the estimator
looks a shape up in them. Pure: the document is parsed from an already-read dict; no torch.

- GEMMs: TFLOP/s by (dtype, op, m, k, n), op fwd | dgrad | wgrad. A shape the table holds is read as measured;
  any other takes the inverse-distance-weighted harmonic mean of the GEMM_NEIGHBOURS nearest rows of that dtype and
  op in log2(m, k, n) space (time-weighted: a slow neighbour is not averaged away), each row as its efficiency
  against its own roofline (the table's best rate or the HBM rate), so memory-bound shapes scale with their bytes.
  Rows timed one call at a time are read less the launch gap (PER_CALL_LAUNCH_GAP_MS).
- Attention: per kernel path, forward and backward rate on the forward's executed FLOPs (4*mb*H*d*s*keys), by
  log2 of the sequence length and the query/kv head counts (looked up in generator/estimate/attention_rates.py).
- float8 casts: nanoseconds per element of torchao's tensorwise amax + cast (eager, compiled).
- HBM: the median GB/s of the streaming copies.
- Layers: whole MoE decoder layers at a model's widths, seconds per layer forward and backward (frozen | full).
- Host: the CPU time to issue a layer's kernels, read by generator/estimate/host_time.py.
A GPU other than the one measured gets the shipped H200 table scaled by the catalog (dense bf16 peak for compute,
memory bandwidth for the memory-bound rows); `ComputeTable.measured` is then False and `source` says so.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from functools import cache

from generator.estimate.host_time import host_tables, model_host_tables, nonneg

GEMM_NEIGHBOURS = 4
FP8_ROW = "+fp8"
"""Suffix of a layer row's variant timed with float8 Linears (`precision: fp8` in the probe's file)."""
GEMM_BURST = "burst"
"""method.gemm_timing of a table whose GEMMs were timed in back-to-back bursts, as a step queues them (the probe
since 2026-12-02, generator/probe/clock.gemm_time)."""
GEMM_INTERLEAVED = "interleaved"
GEMM_TIMINGS = (GEMM_BURST, GEMM_INTERLEAVED)
"""How `probe --compute --gemm-timing` times a GEMM row on the GPU. burst: back-to-back calls (the shipped table's).
interleaved: each call right after a device copy lasting about as long, a step's duty cycle between GEMMs and
memory-bound kernels: back to back, the card sits at its power limit and its clock drops (1,470-1,500 MHz on one
H200), which a step's mix does not hold it at. Mistral-7B's GEMMs at 8,192 tokens ran 690 TFLOP/s (mean) in bursts,
796 interleaved and 796 inside a training step, within 1-3% of the step shape by shape
(bench/results/gemm-in-step-h200-2026-12-04.json). Neither subtracts a launch gap (PER_CALL_LAUNCH_GAP_MS)."""
PER_CALL_LAUNCH_GAP_MS = 0.0192
"""What timing one GEMM call between two CUDA events adds to the call's time in a queue: the launch gap the GPU
waits through after the start event. The median over 46 shapes of 16-350 us (LoRA's rank-8/16/64 GEMMs at 8k-32k
tokens, both sides, all three layouts) of per-call minus burst time, one H200, 2026-12-02
(bench/results/gemm-timing-h200-2026-12-02.json: 16-40 us, median 19.2). Taken off every GEMM row of a table timed
per call (no method.gemm_timing: the probe before this date); a 1-3 ms GEMM moves 1-2%, a 40 us rank-16 one half.
Without it LoRA's rank-16 GEMMs were priced at 180 ms of a Mistral-7B step that profiled 74-78 ms of them
(bench/results/profile-h200-2026-12-02/)."""
ATTENTION_PATHS = ("sdpa_causal", "sdpa_dense", "flex", "sdpa_math")
STREAM_OPS = ("copy_bf16", "add_bf16")
"""The probe's HBM rows that stream (ComputeTable.hbm_gbps is their median)."""
PASSES_OP = "cast_bf16_fp32"
"""The probe's HBM row the layers' elementwise passes are priced at (ComputeTable.passes_gbps)."""


@dataclass(frozen=True, eq=False)
class ComputeTable:
    """One GPU's measured (or scaled) operator rates. eq=False: identity hashing, so lookups cache cheaply."""

    gpu: str
    """GPU name as torch / NVML reports it ("NVIDIA H200")."""
    measured: bool
    """True: measured on this GPU; False: another GPU's table scaled by the catalog, or a provisional table."""
    source: str
    """One line: where the rates come from (file, date, or 'scaled from ...')."""
    gemm: dict
    """(dtype, op) -> tuple of (m, k, n, tflops) rows; dtype bf16 | fp8 | fp32."""
    grouped: dict
    """impl (grouped_mm | loop_bf16 | loop_fp32) -> tuple of (tokens*top_k, k, n, tflops) rows, fwd and dgrad."""
    attention: dict
    """path -> tuple of (seq, heads, kv_heads, doc, fwd_tflops, bwd_tflops) rows, rates on the forward's FLOPs
    (doc: tokens per document of flex's block mask; the sequence for SDPA)."""
    cast_ns_per_elem: dict
    """(kind, mode) -> ns per element; kind cast | cast_transpose, mode eager | compiled."""
    hbm_gbps: float
    """Streaming bandwidth (a bf16 copy and add), GB/s of bytes read + written."""
    passes_gbps: float
    """GB/s at which the decoder layers' elementwise passes (norms, activations, RoPE, residual adds) are priced, x the
    fitted elementwise_scale: the probe's bf16 -> fp32 widening copy (PASSES_OP), a mixed-dtype kernel that, like
    those passes and unlike a plain copy, runs well below the HBM rate and does not follow it from card to card. On
    one H200 it ran 2,156 GB/s against a copy's 4,170; on one H100 1,988 against 3,006 (0.92x where the copy is
    0.72x; generator/compute/h200.json, bench/results/compute-gemma2-h100-2026-12-06.json), and the same compiled
    decoder layers timed on both cards ran 0-7% slower on the H100 (bench/results/*-fp8-layer-rows-*), where
    scaling their passes with the copy priced them 5-15% slower. Eager elementwise kernels, timed one by one in
    profiled steps, do follow the copy (an fp32 add 4.38 -> 2.90 TB/s, a bf16 product 4.42 -> 3.12,
    profile-mistral-full-s8192-h200-2026-12-04 and profile-llama32-full-h100-2026-12-07): on an H100 this rate
    prices eager steps right only where it offsets the GEMMs' over-price (bench/README, thirtieth session)."""
    host: dict
    """(variant full | lora, compiled, liger) -> (forward, backward) host seconds per decoder layer of the probe's
    tiny Mistral: the CPU time PyTorch takes to issue one layer's kernels (backward with the optimizer's per-layer
    share where the probe timed the whole step); {} when not measured (then no host floor)."""
    fit: dict
    """Constants fitted on top of this table (bench/fit_compute.py) and the rows they cite; {} when none."""
    layers: dict = field(default_factory=dict)
    """(hidden, intermediate, heads, kv_heads, experts, top_k, variant frozen | full | qlora | frozen+fp8 | full+fp8,
    compiled) -> rows of (mb, seq, forward s, backward s, checkpointed s) per decoder layer, fewest tokens first,
    timed whole (generator/probe/compute_layers.py: MoE models, eager and compiled as train.py compiles them, and
    --model's own layers, dense or MoE, with float8 Linears; qlora: train.py's NF4 layers,
    bench/scripts/qlora_layer.py); {} when none. Checkpointed: forward and backward with the layer under
    transformers' non-reentrant checkpointing (the forward, its recompute, the backward and the checkpoint's own
    hooks), None in rows timed before it was."""
    host_step: dict = field(default_factory=dict)
    """Same keys as `host` -> host seconds per optimizer step outside the decoder layers (embedding, mask, lm_head,
    loss, the optimizer's fixed part); {} in tables probed before the step was timed."""
    host_models: dict = field(default_factory=dict)
    """(model_type, experts, top_k) -> (host, host_step) keyed as those: a named model's own layer's host rows
    (`probe --compute --model`, generator/estimate/host_time.py), read for that model ahead of the Mistral layer's."""
    filled: tuple = ()
    """What a partial table (`probe --compute --quick`, a probe cut by its time box) took from the shipped one,
    scaled to its own rates (generator/estimate/compute_complete.py); () for a table read as measured."""


def _num(x) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0:
        raise ValueError(f"not a positive number: {x!r}")
    return float(x)


MAX_COUNT = 2**31
"""Above any real GEMM dimension, token or expert count; bounding them keeps a product of three in float range."""


def _count(x, low: int = 1) -> int:
    """A shape or count: a whole number (an integral float too, as JSON may write one) from `low` to MAX_COUNT."""
    bad = isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x != int(x)
    if bad or not low <= x <= MAX_COUNT:
        raise ValueError(f"not a whole number from {low} to 2**31: {x!r}")
    return int(x)


def from_document(doc: dict, source: str) -> ComputeTable:
    """Parse a `probe --compute` document (see generator/probe/compute.py); ValueError on anything malformed."""
    if not isinstance(doc, dict) or doc.get("kind") != "compute" or doc.get("version") != 1:
        raise ValueError("not a version-1 compute file from `python -m generator probe --compute`")
    gemm: dict = {}
    # a measured GPU table timed per call (a provisional table's rates are derived, a CPU probe's have no launch gap)
    method = doc.get("method")
    timing = method.get("gemm_timing") if isinstance(method, dict) else None
    per_call = bool(doc.get("measured")) and doc.get("device") == "cuda" and timing not in GEMM_TIMINGS
    for dtype, rows in (doc.get("gemm") or {}).items():
        for r in rows:
            m, k, n, rate = _count(r["m"]), _count(r["k"]), _count(r["n"]), _num(r["tflops"])
            if per_call and "ms" in r:
                ms = _num(r["ms"])
                rate *= ms / max(ms - PER_CALL_LAUNCH_GAP_MS, 0.5 * ms)
            gemm.setdefault((dtype, r["op"]), []).append((m, k, n, rate))
    if not gemm.get(("bf16", "fwd")):
        raise ValueError("the compute file has no bf16 forward GEMM rows")
    grouped: dict = {}
    for r in doc.get("grouped_gemm") or []:
        row = (_count(r["tokens"]) * _count(r["top_k"]), _count(r["k"]), _count(r["n"]), _num(r["tflops"]))
        grouped.setdefault(r["impl"], []).append(row)
    attention: dict = {}
    for r in doc.get("attention") or []:
        fwd, both = _num(r["fwd_ms"]), _num(r["fwdbwd_ms"])
        seq, heads, kv_heads = _count(r["seq"]), _count(r["heads"]), _count(r["kv_heads"])
        f = 4.0 * _count(r["mb"]) * heads * _count(r["head_dim"]) * seq * _num(r["keys_per_query"])
        bwd_ms = max(both - fwd, 0.5 * fwd)
        doc_len = _count(r.get("doc") or seq)  # 0 or absent: one document per sequence
        row = (seq, heads, kv_heads, doc_len, _count(r["head_dim"]), f / fwd / 1e9, f / bwd_ms / 1e9)
        attention.setdefault(r["path"], []).append(row)
    casts = {(r["kind"], r["mode"]): [] for r in doc.get("fp8_cast") or []}
    for r in doc.get("fp8_cast") or []:
        casts[(r["kind"], r["mode"])].append(_num(r["ns_per_elem"]))
    streams = [_num(r["gbps"]) for r in doc.get("hbm") or [] if r["op"] in STREAM_OPS]
    passes = [_num(r["gbps"]) for r in doc.get("hbm") or [] if r["op"] == PASSES_OP]
    if not streams or not passes:
        raise ValueError(f"the compute file lacks HBM rows ({', '.join((*STREAM_OPS, PASSES_OP))})")
    host, host_step = host_tables(doc.get("host") or [])
    host_models = model_host_tables(doc.get("host") or [])
    layers: dict = {}
    for r in doc.get("layers") or []:
        key = (*(_count(r[k]) for k in ("hidden", "intermediate", "heads", "kv_heads")),
               *(_count(r[k], low=0) for k in ("experts", "top_k")))  # fmt: skip
        fwd, both = nonneg(r["fwd_ms_per_layer"]) / 1e3, nonneg(r["fwdbwd_ms_per_layer"]) / 1e3
        ckpt = r.get("ckpt_ms_per_layer")
        ckpt_s = None if ckpt is None else nonneg(ckpt) / 1e3
        row = (_count(r["mb"]), _count(r["seq"]), fwd, max(both - fwd, 0.0), ckpt_s)
        # rows before compiled ones existed are eager; a float8 row (compute_layers: --model's own) is its own variant
        fp8 = FP8_ROW if r.get("precision") == "fp8" else ""
        variant = (str(r["variant"]) + fp8, bool(r.get("compiled")))
        layers.setdefault((*key, *variant), {})[row[0] * row[1]] = row  # a later row of one size wins
    return ComputeTable(
        gpu=str(doc.get("gpu", "unknown")),
        measured=bool(doc.get("measured", False)),
        source=source,
        gemm={k: tuple(v) for k, v in gemm.items()},
        grouped={k: tuple(v) for k, v in grouped.items()},
        attention={k: tuple(v) for k, v in attention.items()},
        cast_ns_per_elem={k: statistics.median(v) for k, v in casts.items()},
        hbm_gbps=statistics.median(streams),
        passes_gbps=statistics.median(passes),
        host=host,
        fit=dict(doc.get("fit") or {}),
        layers={k: tuple(v[t] for t in sorted(v)) for k, v in layers.items()},
        host_step=host_step,
        host_models=host_models,
    )


def _log_distance(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    return math.sqrt(sum(math.log2(x / y) ** 2 for x, y in zip(a, b, strict=True)))


def weighted_rate(rows, key: tuple[float, ...], dims: int, col: int, sized: int = 0) -> float:
    """Harmonic inverse-distance mean of column `col` over the nearest rows (exact hit: that row). The first `sized`
    dims are sizes: below the smallest measured one the rate falls in proportion (fewer tiles than the GPU has
    multiprocessors, then launch latency), so a call never takes less time than the smallest measured call of that
    size; above the largest it stays at the largest's rate."""
    factor = 1.0
    if sized:
        low = [min(r[d] for r in rows) for d in range(sized)]
        high = [max(r[d] for r in rows) for d in range(sized)]
        factor = math.prod(min(1.0, key[d] / low[d]) for d in range(sized))
        key = tuple(min(max(key[d], low[d]), high[d]) for d in range(sized)) + tuple(key[sized:])
    return factor * _nearest(rows, key, dims, col)


def _nearest(rows, key: tuple[float, ...], dims: int, col: int) -> float:
    near = sorted(rows, key=lambda r: _log_distance(r[:dims], key))[:GEMM_NEIGHBOURS]
    weights, inverse = 0.0, 0.0
    for r in near:
        d = _log_distance(r[:dims], key)
        if d < 1e-9:
            return r[col]
        w = 1.0 / (d * d)
        weights += w
        inverse += w / r[col]
    return weights / inverse


@cache
def gemm_tflops(table: ComputeTable, dtype: str, op: str, m: int, k: int, n: int) -> float:
    """Sustained TFLOP/s of one GEMM (2*m*k*n FLOPs). fp8 falls back to bf16 where the table has no fp8 rows; an op
    with no rows of its own reads the forward's."""
    rows = table.gemm.get((dtype, op)) or table.gemm.get((dtype, "fwd"))
    if not rows:
        if dtype == "bf16":
            raise ValueError("the compute table has no bf16 GEMM rows")
        return gemm_tflops(table, "bf16", op, m, k, n)
    exact = next((r[3] for r in rows if r[:3] == (m, k, n)), None)
    if exact is not None:
        return exact
    peak, by_eff = _efficiencies(table, rows)
    eff = weighted_rate(by_eff, (m, k, n), 3, 3, sized=3)
    return _flops((m, k, n)) / (_roofline_s((m, k, n), peak, table.hbm_gbps) / eff)


@cache
def _efficiencies(table: ComputeTable, rows: tuple) -> tuple[float, tuple]:
    """(best rate, rows as (m, k, n, efficiency against their own roofline)). Neighbours are averaged this way, not
    as raw rates: a rank-16 GEMM streams its input at a rate that scales with its width, so a rank-8 neighbour's raw
    rate would halve it."""
    peak = max(r[3] for r in rows)
    return peak, tuple((*r[:3], _roofline_s(r[:3], peak, table.hbm_gbps) * r[3] / _flops(r[:3])) for r in rows)


def _flops(shape: tuple[int, ...]) -> float:
    m, k, n = shape
    return 2.0 * m * k * n / 1e12


def _roofline_s(shape: tuple[int, ...], peak_tflops: float, hbm_gbps: float) -> float:
    """Seconds of a bf16 GEMM at the table's best GEMM rate or its HBM rate, whichever binds (operands read once,
    the output written once)."""
    m, k, n = shape
    return max(_flops(shape) / peak_tflops, 2.0 * (m * k + k * n + m * n) / (hbm_gbps * 1e9))


@cache
def grouped_tflops(table: ComputeTable, impl: str, rows_total: int, k: int, n: int) -> float:
    """TFLOP/s of an MoE expert GEMM over rows_total = tokens x top_k rows (balanced routing); the dense GEMM of
    one expert's share when the table has no grouped rows of that implementation."""
    rows = table.grouped.get(impl)
    if rows:
        return weighted_rate(rows, (rows_total, k, n), 3, 3, sized=3)
    return gemm_tflops(table, "fp32" if impl == "loop_fp32" else "bf16", "fwd", rows_total, k, n)


def cast_ns(table: ComputeTable, kind: str, compiled: bool) -> float | None:
    """ns per element of a float8 cast (kind cast | cast_transpose); None when the table has none."""
    mode = "compiled" if compiled else "eager"
    return table.cast_ns_per_elem.get((kind, mode)) or table.cast_ns_per_elem.get((kind, "eager"))
