"""`python -m generator topo`: the link matrix, the NVLink islands and (with --num-gpus) the best GPU subset.

Imports only the topology engine; rich is imported when printing. No torch on this path.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from generator.errors import require_at_least_one
from generator.topology import (
    BANDWIDTH_NOTE,
    DEVICE_ORDER_NOTE,
    add_topology_args,
    best_subset,
    check_exclude,
    is_switched,
    islands,
    order_for_hsdp,
    topology_from_args,
    topology_json,
)


def register(subparsers, verb: str, help_text: str) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        verb,
        help=help_text,
        description=help_text + " GPU ids are PCI bus order; launch with CUDA_DEVICE_ORDER=PCI_BUS_ID.",
    )
    add_topology_args(p)
    p.add_argument("--num-gpus", type=int, metavar="K", help="choose the best K GPUs and say why")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    return p


def run(args: argparse.Namespace) -> int:
    require_at_least_one("--num-gpus", args.num_gpus)
    topo = topology_from_args(args)
    exclude = tuple(args.exclude or ())
    selection = best_subset(topo, args.num_gpus, exclude) if args.num_gpus else None
    check_exclude(topo, exclude)
    if args.json:
        for warning in topo.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        print(json.dumps(topology_json(topo, selection, exclude), indent=2))
        return 0
    _print_text(topo, selection, exclude)
    return 0


def _cell(topo, i: int, j: int) -> str:
    if i == j:
        return "X"
    link = topo.link(i, j)
    name = f"NV{link.nvlinks}" if link.kind == "NV" else link.kind
    style = "green" if link.kind == "NV" else ("red" if link.kind == "SYS" else "yellow")
    return f"[{style}]{name}[/] {link.busbw_gbps:.0f}"


def _print_text(topo, selection, exclude) -> None:
    from rich.console import Console
    from rich.table import Table

    out = Console(width=max(120, Console().width), highlight=False)
    names = sorted({g.name for g in topo.gpus})
    memory = sorted({g.memory_gb for g in topo.gpus})
    mem = "memory unknown" if memory == [0.0] else "/".join(f"{m:g} GB" for m in memory)
    out.print(f"[bold]{len(topo.gpus)} x {', '.join(names)}[/] ({mem}) from {topo.source}")
    for warning in topo.warnings:
        out.print(f"[yellow]warning:[/] {warning}")
    out.print("Path kind and predicted all-reduce bus bandwidth per GPU pair (GB/s):")
    table = Table()
    table.add_column("")
    for g in topo.gpus:
        table.add_column(f"GPU{g.index}", justify="right")
    table.add_column("NUMA", justify="right")
    table.add_column("CPUs")
    for g in topo.gpus:
        label = f"GPU{g.index}" + (" (excluded)" if g.index in exclude else "")
        cells = [_cell(topo, g.index, h.index) for h in topo.gpus]
        table.add_row(label, *cells, "-" if g.numa is None else str(g.numa), g.cpu_affinity or "-")
    out.print(table)
    out.print("[bold]NVLink islands[/]")
    for island in islands(topo):
        if len(island) == 1:
            out.print(f"  GPU {island[0]}: no NVLink peer")
            continue
        if len(island) == 2:
            kind = f"NV{topo.link(*island).nvlinks} pair"
        else:
            kind = "NVSwitch" if is_switched(topo, island) else "bridged / mesh"
        out.print(f"  GPUs {','.join(map(str, island))}: {len(island)} GPUs, {kind}")
    if topo.nics:
        where = ", ".join(f"{n} (NUMA {topo.nic_numa[n]})" if n in topo.nic_numa else n for n in topo.nics)
        out.print(f"NICs: {where}")
    if selection is not None:
        _print_selection(out, topo, selection)
    out.print(f"[dim]{DEVICE_ORDER_NOTE}[/]")
    out.print(f"[dim]{BANDWIDTH_NOTE}[/]")


def _print_selection(out, topo, selection) -> None:
    ids = ",".join(map(str, selection.gpu_ids))
    gbps = "no communication" if not math.isfinite(selection.busbw_gbps) else f"{selection.busbw_gbps:.0f} GB/s"
    out.print(f"[bold]Selected GPUs (PCI order): {ids}[/]  predicted bus bandwidth {gbps}")
    style = "bold yellow" if selection.reason.startswith("WARNING") else ""
    out.print(f"[{style}]{selection.reason}[/]" if style else selection.reason)
    order, shard = order_for_hsdp(topo, selection.gpu_ids)
    if selection.spans_islands and 1 < shard < len(order):
        out.print(f"HSDP rank order {','.join(map(str, order))}, shard group size {shard} (one group per island)")
    out.print(f"Launch with: CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={ids}")
