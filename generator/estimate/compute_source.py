"""Which operator-rate table prices a step: the user's `plan --compute-file` (Placement.compute), else the table the
package ships for the H200 (generator/compute/h200.json), scaled by the GPU catalog for any other GPU; and the
constants fitted on top of the shipped table (generator/compute/fit.json, written by bench/fit_compute.py).

Reading the two package files is the only I/O here (JSON, cached): no torch on the planning path.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from generator.catalog.gpus import find_gpu
from generator.estimate.compute_complete import completed
from generator.estimate.compute_scaling import scaled
from generator.estimate.compute_table import ComputeTable, from_document
from generator.estimate.hardware import gpu_rates

DATA_DIR = Path(__file__).resolve().parent.parent / "compute"
SHIPPED = DATA_DIR / "h200.json"
"""The H200 table: measured by `probe --compute` (bench/fit_compute.py copies it in), or provisional."""
FIT = DATA_DIR / "fit.json"
"""Constants fitted on the shipped table and the bench rows each cites (bench/fit_compute.py)."""
SPEED_NOTE_PREFIX = "speed: "
"""Estimate notes that start so say where the operator rates come from (the planner repeats them as a warning)."""


@cache
def shipped_table() -> ComputeTable:
    doc = json.loads(SHIPPED.read_text())
    provisional = doc.get("provisional")
    source = provisional or f"measured on one {doc.get('gpu')} by probe --compute ({doc['method']['measured_at']})"
    return from_document(doc, source)


@cache
def fit_constants() -> dict:
    """name -> value of the constants bench/fit_compute.py fitted (and 'rows' / 'notes' entries that cite them)."""
    return json.loads(FIT.read_text()) if FIT.exists() else {}


def fitted(name: str, default: float) -> float:
    """A fitted constant, or `default` when fit.json does not hold it."""
    value = fit_constants().get(name, {})
    return float(value["value"]) if isinstance(value, dict) and "value" in value else default


@cache
def _for_gpu(gpu_name: str) -> ComputeTable:
    return scaled_to(shipped_table(), gpu_name)


def scaled_to(base: ComputeTable, gpu_name: str) -> ComputeTable:
    """`base` as it prices `gpu_name`: itself on its own GPU, else scaled by the catalog's peak and bandwidth."""
    here, there = find_gpu(gpu_name), find_gpu(base.gpu)
    if here is not None and there is not None and here.name == there.name:
        return base
    mine, ref = gpu_rates(gpu_name), gpu_rates(base.gpu)
    fp8 = bool(here and here.fp8)
    return scaled(base, gpu_name, mine.dense_bf16_tflops / ref.dense_bf16_tflops, mine.hbm_tbps / ref.hbm_tbps, fp8)


@cache
def table_for(gpu_name: str, override: ComputeTable | None = None) -> ComputeTable:
    """The table that prices a step on `gpu_name`: `override` (plan --compute-file) when given, its holes filled from
    the shipped one scaled to its GPU (compute_complete), else the shipped one, scaled by the catalog for a GPU other
    than the one it was measured on."""
    if override is None:
        return _for_gpu(gpu_name)
    known = override.measured and find_gpu(override.gpu) is not None  # a CPU probe's file has nothing to scale to
    return completed(override, _for_gpu(override.gpu)) if known else override


def table_note(table: ComputeTable, gpu_name: str) -> str | None:
    """One line for the plan when the rates are not all measured on this GPU (scaled, provisional, a compute file
    from another GPU, or one completed from the shipped table); None when they are."""
    if not table.measured:
        return f"{SPEED_NOTE_PREFIX}{table.source}"
    here, there = find_gpu(gpu_name), find_gpu(table.gpu)
    other_gpu = here is None or there is None or here.name != there.name
    if not (other_gpu or table.filled):
        return None
    note = f"{SPEED_NOTE_PREFIX}rates from {table.source}"
    if other_gpu:
        note += f", measured on {table.gpu!r}, not on {gpu_name!r}"
    if table.filled:
        note += f"; not in that file, so taken from the shipped table scaled to its rates: {', '.join(table.filled)}"
    return note
