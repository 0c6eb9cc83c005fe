"""REPORT.md's section on rows measured on a GPU other than the H200 the report prices (a call for an H200 can land
on an H100): each row priced for its own card, as the plan prices a card with no probe file of its own (the shipped
H200 table scaled by the GPU catalog, generator/estimate/compute_scaling.py), with the host rows its file timed on
that machine where it has them. Unscored: the targets are the H200's (issue 26 item 6); what this shows is how far
the catalog-scaled figure, which the plan labels as scaled, lands from a measured step.
"""

from __future__ import annotations

from bench.calibration import error_pct, placement
from bench.family_report import mean_abs
from bench.results_rows import _sweep_rows, measured_on_h200, sweep_file
from bench.row import Row
from generator.estimate import Estimate, estimate


def card_of(data: dict) -> str | None:
    """The GPU a sweep results file ran on, where it is not the report's H200 (None for the H200's own files, matrix
    files and files that name no GPU)."""
    if not sweep_file(data) or measured_on_h200(data):
        return None
    return str(data["versions"]["gpu"])


def predict_on_card(row: Row, gpu: str) -> Estimate:
    """The estimator for the row's settings on its own card, from the shipped table scaled to it plus the row's own
    host rows (calibration.placement)."""
    return estimate(row.spec, row.workload, placement(1, {}, row, gpu=gpu), row.strategy)


def card_rows(files: dict[str, dict]) -> list[tuple[str, Row, Estimate]]:
    """(card, row, estimate) for every cell that ran on another card."""
    out = []
    for name, data in sorted(files.items()):
        gpu = card_of(data)
        if gpu is None:
            continue
        for r in _sweep_rows(name, data):
            if r.status == "ok":
                out.append((gpu, r, predict_on_card(r, gpu)))
    return out


def _beside(predicted: float, measured: float | None, fmt: str) -> str:
    if measured is None:
        return "-"
    return f"{fmt.format(measured)} / {fmt.format(predicted)} ({error_pct(predicted, measured):+.1f}%)"


def section(files: dict[str, dict], table) -> list[str]:
    """The markdown lines (none without such rows); `table` is report.py's table writer."""
    rows = card_rows(files)
    if not rows:
        return []
    md = ["", "## Rows on other GPUs (unscored)", ""]
    md += [
        "Each row is priced for the card it ran on from the shipped H200 table scaled by the GPU catalog (what the "
        "plan prints, marked scaled, on a card without `probe --compute`), with the host rows its file timed on "
        "that machine where it has them; the files' `what` says what ran. Measured / predicted (error).",
        "",
    ]
    body = []
    for gpu, r, e in rows:
        body.append([
            r.label, r.source, gpu,
            _beside(e.peak_gb, r.alloc_gb, "{:.2f}"), _beside(e.reserved_gb, r.reserved_gb, "{:.2f}"),
            _beside(e.tokens_per_s_per_gpu, r.tps, "{:.0f}"),
        ])  # fmt: skip
    md += table(["row", "source", "GPU", "allocated GB", "reserved GB", "tokens/s"], body)
    stats = {
        "allocated": mean_abs([error_pct(e.peak_gb, r.alloc_gb) for _, r, e in rows if r.alloc_gb is not None]),
        "reserved": mean_abs([error_pct(e.reserved_gb, r.reserved_gb) for _, r, e in rows if r.reserved_gb]),
        "tokens/s": mean_abs([error_pct(e.tokens_per_s_per_gpu, r.tps) for _, r, e in rows if r.tps is not None]),
    }
    means = "; ".join(f"{k} {v:.1f}% ({n} rows)" for k, (v, n) in stats.items() if n)
    md += ["", f"Mean absolute error: {means}."]
    return md
