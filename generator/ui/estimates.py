"""Presentation of estimates: a rich table for humans and plain dicts for --json (field names per issue 3)."""

from __future__ import annotations

import math

from rich.table import Table

from generator.estimate.types import Estimate

_BREAKDOWN_SHOWN = 3  # largest terms listed beside the peak
CHOSEN_MARK = "* "
"""Plain-text prefix of the chosen strategy's row."""
MFU_HEADER = "MFU exec."
MFU_CONVENTION = (
    "MFU exec. = FLOPs the step executes once (forward, input gradients, weight gradients of trained weights only: "
    "none for a frozen base; attention on the scores the mask keeps; recompute not counted) over the dense bf16 peak; "
    "fp8 rows count bf16-equivalent FLOPs"
)
"""The MFU convention, named under the plan's table (estimate.timing.model_flops_per_token)."""


def _short_breakdown(e: Estimate) -> str:
    top = sorted(e.breakdown.items(), key=lambda kv: -kv[1])[:_BREAKDOWN_SHOWN]
    return ", ".join(f"{name.replace('_', ' ')} {gb:.1f}" for name, gb in top)


def _fit_cell(e: Estimate) -> str:
    spare = e.capacity_gb - e.reserved_gb
    return f"[green]yes[/] (+{spare:.0f} GB)" if e.fits else f"[red]no[/] ({spare:.0f} GB)"


def render_estimates(estimates: list[Estimate], title: str, highlight: str | None = None) -> Table:
    """One row per strategy; `highlight` (a strategy name) is shown bold and marked with CHOSEN_MARK, so the choice
    still shows where bold does not (a pipe, a log file)."""
    caption = (f"{CHOSEN_MARK.strip()} = the plan's choice; " if highlight else "") + MFU_CONVENTION
    table = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    table.add_column("strategy")
    table.add_column("peak GB (largest terms)")
    table.add_column("reserved GB", justify="right")
    table.add_column("fits", justify="right")
    table.add_column("comm GB / s", justify="right")
    table.add_column("step s", justify="right")
    table.add_column("tokens/s/GPU", justify="right")
    table.add_column(MFU_HEADER, justify="right")
    for e in estimates:
        cpu = f" +{e.cpu_gb:.0f} GB CPU" if e.cpu_gb else ""
        table.add_row(
            f"{CHOSEN_MARK}{e.strategy}" if e.strategy == highlight else e.strategy,
            f"{e.peak_gb:.1f} ({_short_breakdown(e)}){cpu}",
            f"{e.reserved_gb:.1f}",
            _fit_cell(e),
            f"{e.comm_gb_per_step:.1f} / {e.comm_s:.2f}",
            f"{e.step_s:.2f}",
            f"{e.tokens_per_s_per_gpu:,.0f}",
            f"{e.mfu:.0%}",
            style="bold" if e.strategy == highlight else None,
        )
    return table


def _r(x: float, digits: int) -> float | None:
    """Rounded, or None for inf/nan (e.g. a multi-GPU placement given no bandwidth): JSON has no Infinity."""
    return round(float(x), digits) if math.isfinite(x) else None


def estimate_to_dict(e: Estimate) -> dict:
    """JSON-ready dict; GB to 2 decimals (breakdown rounded so it still sums to peak_gb within 0.01 per term)."""
    return {
        "strategy": e.strategy,
        "fits": e.fits,
        "peak_gb": _r(e.peak_gb, 2),
        "reserved_gb": _r(e.reserved_gb, 2),
        "capacity_gb": _r(e.capacity_gb, 2),
        "breakdown": {k: _r(v, 3) for k, v in e.breakdown.items()},
        "comm_gb_per_step": _r(e.comm_gb_per_step, 3),
        "comm_s": _r(e.comm_s, 4),
        "compute_s": _r(e.compute_s, 4),
        "step_s": _r(e.step_s, 4),
        "tokens_per_s_per_gpu": _r(e.tokens_per_s_per_gpu, 1),
        "mfu": _r(e.mfu, 4),
        "cpu_gb": _r(e.cpu_gb, 2),
        "host_s": _r(e.host_s, 4),
        "tail_s": _r(e.tail_s, 4),
        "host_bound": e.host_bound,
        "host_as_mistral": e.host_as_mistral,
        "notes": list(e.notes),
    }
