"""bench/other_cards.py: rows measured on a card other than the report's H200 are priced for their own card (the
shipped table scaled by the catalog, with their file's host rows), and a file run under the profiler gives no
tokens/s."""

from __future__ import annotations

from dataclasses import asdict

from bench import families, other_cards
from bench.calibration import placement, predict
from bench.results_rows import load_rows
from generator.estimate.compute_source import table_for

H100 = "NVIDIA H100 80GB HBM3"
CELL = families.TAIL_BLIND[0]  # Llama-3.2-3B full at 1,024 x 1: host-bound, so host rows move it


def _file(gpu: str, tps: float = 6000.0, host: list | None = None, **extra) -> dict:
    m = dict(peak_allocated_gb=50.0, peak_reserved_gb=55.0, tokens_per_s_per_gpu=tps)
    cell = dict(asdict(CELL), key=CELL.key, doc_tokens=CELL.doc_tokens, status="ok", command="", measured=m)
    return {"machine": "x", "versions": {"gpu": gpu}, "cells": {CELL.key: cell}, "host": host or [], **extra}


def _host_row(variant: str, ms: float, **model) -> dict:
    return {"variant": variant, "compiled": False, "liger": False, "layers": 6, "tokens": 64,
            "fwd_ms_per_layer": ms / 3, "fwdbwd_ms_per_layer": ms, "step_ms": ms, **model}  # fmt: skip


def test_a_row_on_another_card_is_priced_for_that_card_not_as_an_h200():
    files = {"h100.json": _file(H100), "h200.json": _file("NVIDIA H200")}
    ((gpu, row, e),) = other_cards.card_rows(files)
    assert gpu == H100 and row.source == "h100.json"
    (h200_row,) = load_rows({"h200.json": files["h200.json"]})
    as_h200 = predict(h200_row, {})
    assert e.tokens_per_s_per_gpu < 0.99 * as_h200.tokens_per_s_per_gpu  # the H100's HBM is the slower
    assert any("scaled from the NVIDIA H200 table" in n for n in e.notes)
    md = "\n".join(other_cards.section(files, lambda head, rows: [" | ".join(r) for r in rows]))
    assert "## Rows on other GPUs (unscored)" in md and "h100.json" in md and "h200.json" not in md
    assert other_cards.section({"h200.json": files["h200.json"]}, lambda h, r: r) == []


def test_its_own_host_rows_price_it_and_a_slower_host_reads_slower():
    fast = _file(H100, host=[_host_row("full", 1.0)])
    slow = _file(H100, host=[_host_row("full", 10.0)])
    ((_, _, e_fast),) = other_cards.card_rows({"a.json": fast})
    ((_, _, e_slow),) = other_cards.card_rows({"a.json": slow})
    assert e_slow.host_s > 5 * e_fast.host_s and e_slow.tokens_per_s_per_gpu < e_fast.tokens_per_s_per_gpu


def test_a_file_of_a_models_own_host_rows_alone_keeps_the_tables_mistral_rows():
    """qlora_host.py writes only the model's own rows: the other levers still find the table's Mistral rows."""
    own = _host_row("full", 4.0, model_type="llama", experts=0, top_k=0)
    (row,) = load_rows({"x.json": _file("NVIDIA H200", host=[own])})
    table = placement(1, {}, row).compute
    assert table.host == table_for("NVIDIA H200").host and table.host_models


def test_a_profiled_file_gives_memory_but_no_tokens_per_s():
    (row,) = load_rows({"p.json": _file("NVIDIA H200", profiled=True)})
    assert row.tps is None and row.alloc_gb == 50.0
    ((_, card_row, _),) = other_cards.card_rows({"p.json": _file(H100, profiled=True)})
    assert card_row.tps is None
