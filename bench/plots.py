"""PNG plots for bench/REPORT.md (matplotlib, Agg backend; imported only when plots are drawn)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bench.row import GPU_MEMORY_GB  # noqa: E402

SIZES = {"1M": 2**20, "16M": 2**24, "256M": 2**28, "1G": 2**30, "2G": 2**31}
# No timestamp or version in the files, so regenerating unchanged data gives the same bytes.
METADATA = {"Software": None, "Creation Time": None}


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata=METADATA)
    plt.close(fig)


def memory_plot(items: list[tuple[str, float, float, float | None, float | None]], capacity: float, path: Path):
    """items: (label, measured alloc, predicted alloc, measured reserved, predicted reserved)."""
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(items) + 1.8))
    ys = range(len(items))
    h = 0.2
    series = [
        (1, "measured allocated", "tab:blue"),
        (2, "predicted allocated", "tab:cyan"),
        (3, "measured reserved", "tab:orange"),
        (4, "predicted reserved", "tab:olive"),
    ]
    for idx, name, color in series:
        vals = [it[idx] or 0.0 for it in items]
        ax.barh([y + (idx - 2.5) * h for y in ys], vals, height=h, color=color, label=name)
    ax.axvline(GPU_MEMORY_GB, color="red", linestyle="-", label=f"H200 memory {GPU_MEMORY_GB:.2f} GB")
    ax.axvline(capacity, color="red", linestyle="--", label=f"planner's usable capacity {capacity:.1f} GB")
    ax.set_yticks(list(ys), [it[0] for it in items], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("peak GPU memory per rank, GB")
    ax.set_title("Peak memory per strategy: measured vs predicted (current estimator)")
    ax.legend(fontsize=7, loc="lower right")
    _save(fig, path)


def bandwidth_plot(curves: list[tuple[str, dict[str, float]]], path: Path) -> None:
    """curves: (label, {size name: busbw GB/s})."""
    fig, ax = plt.subplots(figsize=(9, 7))
    for label, points in curves:
        sizes = sorted((SIZES[s], v) for s, v in points.items() if s in SIZES)
        style = "--" if "all_gather" in label or "reduce_scatter" in label else "-"
        ax.plot([s for s, _ in sizes], [v for _, v in sizes], style, marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(list(SIZES.values()), list(SIZES))
    ax.set_xlabel("message size")
    ax.set_ylabel("bus bandwidth, GB/s (nccl-tests definition)")
    ax.set_title("Measured bus bandwidth per GPU subset and path")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2)
    _save(fig, path)


def throughput_plot(items: list[tuple[str, float, float]], path: Path) -> None:
    """items: (label, measured tokens/s per GPU, predicted)."""
    fig, ax = plt.subplots(figsize=(10, 0.4 * len(items) + 1.6))
    ys = list(range(len(items)))
    ax.barh([y - 0.2 for y in ys], [it[1] for it in items], height=0.4, color="tab:blue", label="measured")
    ax.barh([y + 0.2 for y in ys], [it[2] for it in items], height=0.4, color="tab:cyan", label="predicted")
    ax.set_yticks(ys, [it[0] for it in items], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("tokens/s per GPU")
    ax.set_title("Throughput per strategy: measured vs predicted (current estimator)")
    ax.legend(fontsize=8)
    _save(fig, path)


def fp8_curves_plot(panels: list[tuple[str, dict[str, tuple[list[float], list[float]]]]], path: Path) -> None:
    """panels: (method, {precision: (per-step losses, per-step grad norms)}); per step faint, MA20 solid."""
    from bench.fp8_curves import MA, WINDOWS, moving_average

    fig, axes = plt.subplots(2, len(panels), figsize=(6 * len(panels), 7.5), sharex=True, squeeze=False)
    colors = {"bf16": "tab:blue", "fp8": "tab:orange"}
    for col, (method, runs) in enumerate(panels):
        for row, (title, what) in enumerate((("loss", "loss, nats"), ("gradient norm", "norm before clipping at 1.0"))):
            ax = axes[row][col]
            for precision, series in runs.items():
                ys = series[row]
                steps = range(1, len(ys) + 1)
                ax.plot(steps, ys, color=colors.get(precision), alpha=0.25, linewidth=0.8)
                ax.plot(steps, moving_average(ys), color=colors.get(precision), label=f"{precision} MA{MA}")
            for first, _ in WINDOWS:
                ax.axvline(first - 0.5, color="grey", linestyle=":", linewidth=0.8)
            ax.set_yscale("log")  # both fall over three decades: a linear axis hides the later windows
            ax.set_ylabel(what)
            ax.grid(True, which="both", alpha=0.3)
            ax.set_title(f"{method}: {title}", fontsize=10)
            ax.legend(fontsize=8)
        axes[1][col].set_xlabel(f"step (dotted: scored windows {', '.join(f'{a}-{z}' for a, z in WINDOWS)})")
    fig.suptitle("Float8 vs bf16: per step (faint) and 20-step moving average (solid)", fontsize=11)
    _save(fig, path)
