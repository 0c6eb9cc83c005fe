"""The summary `probe --compute` prints: a few headline rates per section and what the time boxes skipped."""

from __future__ import annotations

import statistics
from pathlib import PurePath

from rich.table import Table


def _span(values: list[float]) -> str:
    if not values:
        return "-"
    return " / ".join(f"{v:,.4g}" for v in (min(values), statistics.median(values), max(values)))


def print_summary(console, doc: dict) -> None:
    table = Table(title=f"Measured operator rates on {doc['gpu']} ({doc['method']['seconds']} s)")
    table.add_column("section")
    table.add_column("rows", justify="right")
    table.add_column("min / median / max")
    table.add_column("unit")
    for dtype, rows in doc["gemm"].items():
        table.add_row(f"GEMM {dtype}", str(len(rows)), _span([r["tflops"] for r in rows]), "TFLOP/s")
    casts = doc.get("fp8_cast", [])
    table.add_row("float8 cast", str(len(casts)), _span([r["gbps_3_bytes_per_elem"] for r in casts]), "GB/s (3 B/el)")
    for impl in sorted({r["impl"] for r in doc["grouped_gemm"]}):
        rows = [r["tflops"] for r in doc["grouped_gemm"] if r["impl"] == impl]
        table.add_row(f"experts {impl}", str(len(rows)), _span(rows), "TFLOP/s")
    for path in sorted({r["path"] for r in doc["attention"]}):
        rows = [r["fwdbwd_tflops"] for r in doc["attention"] if r["path"] == path]
        table.add_row(f"attention {path}", str(len(rows)), _span(rows), "TFLOP/s fwd+bwd")
    table.add_row("HBM", str(len(doc["hbm"])), _span([r["gbps"] for r in doc["hbm"]]), "GB/s")
    for r in doc.get("host", []):
        name = f"host {r['variant']}" + (" compiled" if r["compiled"] else "") + (" liger" if r.get("liger") else "")
        name += f", {PurePath(str(r['model'])).name}'s layer" if "model_type" in r else ""  # a directory: its name
        step = f", {r['step_ms']:.3g} ms/step outside" if "step_ms" in r else ""
        table.add_row(
            name, "1", f"{r['fwd_ms_per_layer']:.3g} fwd / {r['fwdbwd_ms_per_layer']:.3g} step{step}", "ms/layer"
        )
    console.print(table)
    for line in doc["skipped"][:8]:
        console.print(f"[yellow]skipped[/]: {line}")
    if len(doc["skipped"]) > 8:
        console.print(f"[yellow]skipped[/]: ... and {len(doc['skipped']) - 8} more (listed in the file)")
