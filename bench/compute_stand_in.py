"""Held-out rows priced through a `probe --compute` file as `plan --compute-file` reads it (holes completed from the
shipped table, generator/estimate/compute_complete.py), beside the shipped table: whether a probe's file, `--quick`'s
included, stands in for the table the repository measured.

    python bench/compute_stand_in.py bench/results/compute-h200-2026-12-03-quick-d.json \
        bench/results/compute-h200-2026-12-03-g.json --rows h200-x1-families-unseen-2026-12-03.json

Rows: every validation row (bench/holdout.py) of the results files named by --rows (default: all), single GPU.
Prints tokens/s error per row and file and the mean absolute error per file.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.calibration import error_pct, measured_busbw, placement  # noqa: E402
from bench.results_rows import load_files, load_rows  # noqa: E402
from bench.row import GPU_NAME  # noqa: E402
from generator.estimate import estimate  # noqa: E402
from generator.estimate.compute_source import table_for  # noqa: E402
from generator.estimate.compute_table import from_document  # noqa: E402


def tables(paths: list[Path]) -> dict[str, object]:
    out = {"shipped": table_for(GPU_NAME)}
    for p in paths:
        out[p.name] = table_for(GPU_NAME, from_document(json.loads(p.read_text()), p.name))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("compute", nargs="+", type=Path, help="probe --compute files")
    ap.add_argument("--rows", action="append", default=None, help="results file names whose rows to price")
    args = ap.parse_args(argv)
    files = load_files()
    busbw = measured_busbw(files)
    rows = [r for r in load_rows(files) if r.role == "validation" and r.gpus == 1 and r.tps]
    if args.rows:
        rows = [r for r in rows if r.source in args.rows]
    by_table = tables(args.compute)
    errors: dict[str, list[float]] = {name: [] for name in by_table}
    print("| row | measured | " + " | ".join(by_table) + " |")
    for row in rows:
        cells = []
        for name, table in by_table.items():
            got = estimate(row.spec, row.workload, placement(row.gpus, busbw, None, table), row.strategy)
            err = error_pct(got.tokens_per_s_per_gpu, row.tps)
            errors[name].append(abs(err))
            cells.append(f"{err:+.1f}%")
        print(f"| {row.label} | {row.tps:,.0f} | " + " | ".join(cells) + " |")
    print("| mean absolute | | " + " | ".join(f"{statistics.fmean(v):.1f}%" for v in errors.values()) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
