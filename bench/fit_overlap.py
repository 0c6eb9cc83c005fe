"""Fit the estimator's communication overlap per strategy family (DDP / DeepSpeed / FSDP) on measured step times.

    python bench/fit_overlap.py            # every two-GPU matrix row in bench/results/, NVLink and slow wires

Model per row: measured step = rest + (1 - overlap) x comm, where comm is the estimator's communication time at the
row's own wire busbw (`Estimate.comm_s`) and rest is the rest of its predicted step (`step_s - comm_s`, i.e. the step
with nothing hidden, which is what the estimator predicts today: its OVERLAP_EFFICIENCY is 0). Least squares over the
fit rows of one family gives (1 - overlap) = sum(comm x (measured - rest)) / sum(comm^2). The estimator's own term
caps what is hidden at the compute window; this fit does not, so a value near 1 says "hidden entirely", to be checked
against that cap before it goes into generator/estimate/timing.py. Rows held out (role validation: the seq 4096
sockets rows, bench/wires.py WIRE_VALIDATION_KEYS) are never fitted; their errors under the fitted value are printed.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from generator.catalog import strategies as catalog  # noqa: E402


@dataclass(frozen=True)
class StepRow:
    """One measured step beside its prediction split into communication and the rest."""

    key: str
    """Where it came from: results file and cell label."""
    family: str
    """ddp | deepspeed | fsdp (the strategy's framework in the catalog)."""
    rest_s: float
    """Predicted step time without communication."""
    comm_s: float
    """Predicted communication time at the row's wire busbw, nothing hidden."""
    measured_s: float
    """Measured median step time."""
    role: str = "fit"
    """fit or validation (held out)."""


@dataclass(frozen=True)
class Fit:
    """One family's fitted overlap."""

    family: str
    overlap: float
    """Fitted share of communication hidden (unclipped: outside [0, 1] says the model is missing something else)."""
    fit_keys: tuple[str, ...]
    """The rows it came from."""
    rms_pct: float
    """Root-mean-square step-time error over the fit rows with the fitted value, percent."""


def predicted_s(row: StepRow, overlap: float) -> float:
    return row.rest_s + (1.0 - overlap) * row.comm_s


def error_pct(row: StepRow, overlap: float) -> float:
    return 100.0 * (predicted_s(row, overlap) - row.measured_s) / row.measured_s


def fit(rows: list[StepRow]) -> dict[str, Fit]:
    """Family -> overlap fitted on its fit rows (a family with no communication to fit on is left out)."""
    out = {}
    for family in sorted({r.family for r in rows}):
        mine = [r for r in rows if r.family == family and r.role == "fit"]
        denom = sum(r.comm_s**2 for r in mine)
        if not mine or denom == 0:
            continue
        exposed = sum(r.comm_s * (r.measured_s - r.rest_s) for r in mine) / denom
        overlap = 1.0 - exposed
        rms = (sum(error_pct(r, overlap) ** 2 for r in mine) / len(mine)) ** 0.5
        out[family] = Fit(family, overlap, tuple(r.key for r in mine), rms)
    return out


def rows_from_results(files: dict[str, dict]) -> list[StepRow]:
    """Two-GPU matrix rows that ran, each predicted at its wire's measured busbw."""
    from bench.calibration import measured_busbw, predict
    from bench.results_rows import load_rows
    from bench.wires import busbw_by_wire

    busbw, wires = measured_busbw(files), busbw_by_wire(files)
    out = []
    for r in load_rows(files):
        if not (r.from_matrix and r.gpus > 1 and r.status == "ok" and r.tps) or r.unmodelled:
            continue
        e = predict(r, busbw, wires)
        measured = r.seq_len * r.micro_batch * r.grad_accum / r.tps
        family = catalog.strategy(r.strategy).framework
        out.append(StepRow(f"{r.source}: {r.label}", family, e.step_s - e.comm_s, e.comm_s, measured, r.role))
    return out


def report(rows: list[StepRow], fits: dict[str, Fit]) -> str:
    lines = []
    for family, f in fits.items():
        lines.append(f"{family}: overlap {f.overlap:.3f} from {len(f.fit_keys)} rows (rms {f.rms_pct:.1f}%)")
        lines += [f"  fit {k}" for k in f.fit_keys]
        for r in (r for r in rows if r.family == family and r.role == "validation"):
            lines.append(f"  held out {r.key}: {error_pct(r, f.overlap):+.1f}% (at overlap 0: {error_pct(r, 0):+.1f}%)")
    return "\n".join(lines) or "no two-GPU rows with communication to fit"


def main() -> int:
    from bench.results_rows import load_files

    rows = rows_from_results(load_files())
    print(report(rows, fit(rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
