"""Predict sweep cells before they run: what bench/calibration.py will compare each cell's measurement with, written
down ahead of the device call (bench/results/predicted/), so a later change to the estimator cannot move the
prediction a held-out row was chosen with.

Each cell of bench/sweep_grid.py's CELLS matching `--only` is turned into the row its run will become (train.py's
command as sweep.py builds it, a placeholder measurement) and priced by bench/calibration.py's predict, the report's own
path, with the measured bus bandwidths of bench/results/. No GPU, nothing runs.

    PYTHONPATH=. python bench/predict_cells.py --only 'train.py-phi-default-*' --out bench/results/predicted/x.json \\
        --what "predictions of ... before any ran"
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import asdict
from datetime import date
from pathlib import Path

from bench.calibration import measured_busbw, predict
from bench.other_cards import predict_on_card
from bench.results_rows import RESULTS_DIR, _sweep_rows, load_files
from bench.sweep import select, train_command
from bench.sweep_grid import CELLS
from bench.wires import busbw_by_wire

PLACEHOLDER = {"peak_allocated_gb": 1.0, "peak_reserved_gb": 1.0, "tokens_per_s_per_gpu": 1.0}
"""What stands for a measurement: _sweep_rows reads a row from an 'ok' cell with one."""


def cell_records(cells) -> dict:
    """sweep.py's results layout for `cells`, as if each had run: its fields, key and train.py command."""
    work = Path("/tmp/bench-sweep")
    records = {}
    for c in cells:
        command = train_command(c, work / "x.yaml", work / "x.jsonl", work / c.model, work / "d.jsonl", work / "o")
        records[c.key] = dict(asdict(c), key=c.key, doc_tokens=c.doc_tokens, status="ok",
                              command=" ".join(map(str, command)), measured=dict(PLACEHOLDER))  # fmt: skip
    return records


def predictions(cells, gpu: str | None = None) -> dict:
    """Cell key -> what the report will predict for it (GB, tokens/s per GPU, fits, host-bound): on the report's
    H200, or with `gpu` on that card as the report's other-cards section prices it (the table scaled by the catalog)."""
    files = load_files(RESULTS_DIR)
    busbw, wires = measured_busbw(files), busbw_by_wire(files)
    out = {}
    for row in _sweep_rows("predicted", {"machine": "h200-x1", "cells": cell_records(cells)}):
        e = predict_on_card(row, gpu) if gpu else predict(row, busbw, wires)
        out[row.key] = dict(allocated_gb=round(e.peak_gb, 2), reserved_gb=round(e.reserved_gb, 2),
                            tokens_per_s=round(e.tokens_per_s_per_gpu), fits=e.fits,
                            host_bound=e.host_s > e.gpu_work_s)  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--only", required=True, help="comma list of cell-key glob patterns (bench/sweep.py --only)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--what", required=True, help="what the file holds and why, for the report's file list")
    ap.add_argument("--gpu", help="price them on this card (e.g. 'NVIDIA H100 80GB HBM3'), not the report's H200")
    args = ap.parse_args(argv)
    cells = select(CELLS, args.only.split(","))
    if not cells:
        print(f"no cell matches --only {args.only!r} (bench/sweep.py --list names them)", file=sys.stderr)
        return 2
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    found = predictions(cells, args.gpu)
    for key, p in found.items():
        print(key, p)
    data = {
        "what": args.what,
        "date": date.today().isoformat(),
        "commit": head,
        "gpu": args.gpu or "NVIDIA H200",
        "cells": found,
    }
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
