"""What the current estimator predicts for a measured row (bench/row.py), on the measured machine as the planner would
place it: the bus bandwidth its probes measured and the host rows measured beside it."""

from __future__ import annotations

from dataclasses import replace

from bench.row import GPU_NAME, Row, card_memory_gb
from bench.wires import NVLINK, busbw_by_wire
from generator.estimate import Estimate, Placement, estimate
from generator.estimate.compute_source import table_for
from generator.estimate.host_time import host_ratio, host_tables, model_host_tables, rescaled


def measured_busbw(files: dict[str, dict], wire: str = NVLINK) -> dict[int, float]:
    """GPU count -> best measured all-reduce busbw (GB/s, largest message) of that wire's probes (bench/wires.py)."""
    return busbw_by_wire(files)[wire]


def placement(gpus: int, busbw: dict[int, float], row: Row | None = None, table=None, gpu: str = GPU_NAME) -> Placement:
    """What the planner hands the estimator for `gpus` of the measured machine's `gpu` (one GPU: no bus, busbw 0):
    `table` (the shipped one, scaled to `gpu` by the catalog, when None) with the row's own machine's host rows where
    its file has them."""
    if row is not None and row.host:
        base = table if table is not None else table_for(gpu)
        host, host_step = host_tables(list(row.host))
        if not host:  # only a model's own rows (qlora_host.py): the Mistral rows stay the table's
            host, host_step = base.host, base.host_step
        own = model_host_tables(list(row.host)) or rescaled(base.host_models, host_ratio(host, base.host) or 1.0)
        table = replace(base, host=host, host_step=host_step, host_models=own,
                        source=f"{base.source} + host rows of {row.source}")  # fmt: skip
    return Placement(
        num_gpus_per_machine=gpus,
        gpu_name=gpu,
        gpu_memory_gb=card_memory_gb(gpu),
        busbw_gbps=busbw.get(gpus, 0.0) if gpus > 1 else 0.0,
        compute=table,
    )


def predict(row: Row, busbw: dict[int, float], wires: dict[str, dict[int, float]] | None = None) -> Estimate:
    """The estimator for the row's settings; `busbw` is NVLink's, a slow-wire row takes its own from `wires`
    (busbw_by_wire) and is refused without it rather than predicted at NVLink's bandwidth."""
    if row.wire != NVLINK and row.gpus > 1:
        if not wires or row.gpus not in wires.get(row.wire, {}):
            raise ValueError(f"{row.label}: no {row.wire} probe in bench/results/ (bench/wires.py probe makes one)")
        busbw = wires[row.wire]
    return estimate(row.spec, row.workload, placement(row.gpus, busbw, row), row.strategy)


def error_pct(predicted: float, measured: float) -> float:
    return 100.0 * (predicted - measured) / measured
