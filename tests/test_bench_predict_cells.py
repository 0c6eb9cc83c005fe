"""bench/predict_cells.py writes down, before a device call, what the report will predict for each cell: a cell that
has since run is priced exactly as the report prices its measured row."""

from __future__ import annotations

import json

import pytest

from bench.calibration import measured_busbw, predict
from bench.predict_cells import main, predictions
from bench.results_rows import RESULTS_DIR, _sweep_rows, load_files
from bench.sweep_grid import CELLS
from bench.wires import busbw_by_wire

RAN = "h200-x1-families-compile-pairs-2026-12-04.json"
"""A sweep file priced with the shipped host rows (it carries none of its own)."""
KEYS = ("train.py-g1-ddp-full-s4096-mb2-ckpton-sdpa-fill", "train.py-g1-ddp-full-s4096-mb2-ckpton-sdpa-fill-compiled")


def test_a_cell_that_ran_is_predicted_as_the_report_prices_its_row():
    files = load_files(RESULTS_DIR)
    busbw, wires = measured_busbw(files), busbw_by_wire(files)
    rows = {r.key: r for r in _sweep_rows(RAN, files[RAN]) if r.key in KEYS}
    ahead = predictions([c for c in CELLS if c.key in KEYS])
    assert set(ahead) == set(rows) == set(KEYS)
    for key, row in rows.items():
        e = predict(row, busbw, wires)
        assert ahead[key]["tokens_per_s"] == round(e.tokens_per_s_per_gpu)
        assert ahead[key]["reserved_gb"] == pytest.approx(e.reserved_gb, abs=0.01)
    # compiled layers are the lever these two differ by, and the estimator prices them apart
    assert ahead[KEYS[1]]["tokens_per_s"] != ahead[KEYS[0]]["tokens_per_s"]


def test_a_pattern_that_matches_nothing_is_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["--only", "no-such-cell-*", "--out", str(out), "--what", "x"]) == 2
    assert "no cell matches" in capsys.readouterr().err and not out.exists()


def test_the_file_says_what_it_holds(tmp_path):
    out = tmp_path / "p.json"
    assert main(["--only", KEYS[0], "--out", str(out), "--what", "before the call"]) == 0
    data = json.loads(out.read_text())
    assert data["what"] == "before the call" and set(data["cells"]) == {KEYS[0]} and data["date"]
