"""A compute table for another GPU, or for a faster or slower one than measured: every rate scaled. Pure; no torch."""

from __future__ import annotations

from dataclasses import replace

from generator.estimate.compute_table import ComputeTable


def faster_gemm_rows(rows, ratio: float) -> tuple:
    """(m, k, n, TFLOP/s) rows (GEMM or grouped) on a GPU `ratio` times as fast."""
    return tuple((m, k, n, t * ratio) for m, k, n, t in rows)


def faster_layer_rows(rows, ratio: float) -> tuple:
    """Whole-layer rows (mb, seq, forward s, backward s, checkpointed s | None) on a GPU `ratio` times as fast."""
    return tuple((mb, s, f / ratio, b / ratio, None if c is None else c / ratio) for mb, s, f, b, c in rows)


def scaled(table: ComputeTable, gpu: str, compute_ratio: float, memory_ratio: float, fp8: bool) -> ComputeTable:
    """`table` for another GPU: every compute rate x compute_ratio (catalog dense bf16 peak over the measured
    GPU's), HBM x memory_ratio and the casts / memory_ratio; no fp8 rows where the part has no fp8 tensor cores.
    The layers' elementwise passes are priced at a rate below the measured card's HBM rate, which on a card with
    less is kept, up to its streaming rate (and compute_time prices them no faster than its copy), and on a faster
    one scales with the bandwidth: compiled layers slowed that little on an H100, eager kernels by the bandwidth
    (ComputeTable.passes_gbps says which rows show which).
    The host rows stay (they are the CPU's, not the GPU's); the whole-layer rows scale with compute."""
    gemm = {key: faster_gemm_rows(rows, compute_ratio) for key, rows in table.gemm.items() if fp8 or key[0] != "fp8"}
    grouped = {impl: faster_gemm_rows(rows, compute_ratio) for impl, rows in table.grouped.items()}
    attention = {
        p: tuple((s, h, kv, d, w, f * compute_ratio, b * compute_ratio) for s, h, kv, d, w, f, b in rows)
        for p, rows in table.attention.items()
    }
    casts = {k: v / memory_ratio for k, v in table.cast_ns_per_elem.items()} if fp8 else {}
    layers = {k: faster_layer_rows(rows, compute_ratio) for k, rows in table.layers.items()}
    passes = min(table.passes_gbps * max(memory_ratio, 1.0), table.hbm_gbps * memory_ratio)
    return replace(
        table,
        gpu=gpu,
        measured=False,
        source=f"scaled from the {table.gpu} table by the GPU catalog (compute x{compute_ratio:.2f}, memory "
        f"x{memory_ratio:.2f}, the widening copy that prices the layers' elementwise passes "
        f"x{passes / table.passes_gbps:.2f}), not measured",
        gemm=gemm,
        grouped=grouped,
        attention=attention,
        cast_ns_per_elem=casts,
        hbm_gbps=table.hbm_gbps * memory_ratio,
        passes_gbps=passes,
        layers=layers,
    )
