"""bench/scripts/own_host_whatif.py: another machine's own-layer host rows price a bench row through the estimator,
rescaled by the two machines' Mistral rows (a slower host's own rows make the host-bound row slower)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
OWN = RESULTS / "h100-x1-host-rows-qwen3-own-2026-12-06.json"
MISTRAL = RESULTS / "h100-x1-host-rows-mistral-2026-12-06.json"


def _slower(rows: list[dict], factor: float) -> list[dict]:
    keys = ("fwd_ms_per_layer", "fwdbwd_ms_per_layer", "step_ms")
    return [{**r, **{k: r[k] * factor for k in keys if k in r}} for r in rows]


@pytest.mark.xdist_group("report")
def test_own_rows_reach_the_price_and_a_slower_layer_prices_the_row_slower():
    from bench.scripts.own_host_whatif import whatif

    own = json.loads(OWN.read_text())["host"]
    mistral = json.loads(MISTRAL.read_text())["host"]
    (row,) = whatif(own, mistral, "qwen3-30b")  # the one Qwen3 row whose file holds its machine's host rows
    assert row["measured"] and row["ratio"] > 1  # that H200 machine's host is slower than the H100's
    (slow,) = whatif(_slower(own, 3.0), mistral, "qwen3-30b")
    assert slow["predicted"] == row["predicted"]  # the report's price does not read them
    assert slow["with_own_rows"] < row["with_own_rows"]
    # the same rows from a host three times as fast as the one they were timed on read as the originals
    (same,) = whatif(_slower(own, 3.0), _slower(mistral, 3.0), "qwen3-30b")
    assert same["with_own_rows"] == pytest.approx(row["with_own_rows"], rel=1e-6)
