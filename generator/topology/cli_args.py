"""The topology flags every verb shares (`topo`, `plan`, `check`, `probe`, the wizard)."""

from __future__ import annotations

import argparse
import re

from generator.errors import UserError
from generator.topology.build import MEMORY_HINT
from generator.topology.detect import load_topology
from generator.topology.machines import REFERENCE_MACHINES
from generator.topology.types import Topology


def parse_gpu_list(text: str) -> tuple[int, ...]:
    """ "0,3" or "0-3,6" -> sorted unique ids; "" -> (). argparse turns ValueError into a usage error (exit 2)."""
    ids: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        m = re.fullmatch(r"(\d{1,4})(?:-(\d{1,4}))?", part)
        if not m:
            raise argparse.ArgumentTypeError(f"{part!r} is not a GPU id; write ids like 0,3 or 0-3")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise argparse.ArgumentTypeError(f"range {part!r} runs backwards")
        ids.update(range(lo, hi + 1))
    return tuple(sorted(ids))


def add_topology_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--topo-file",
        metavar="FILE",
        help="saved `nvidia-smi topo -m` output ('-' reads stdin); an optional FILE.json beside it gives GPU name "
        "and memory_gb",
    )
    group.add_argument(
        "--machine",
        choices=list(REFERENCE_MACHINES),
        help="a bundled reference machine instead of this one: "
        + "; ".join(f"{k}: {v}" for k, v in REFERENCE_MACHINES.items()),
    )
    parser.add_argument(
        "--gpu",
        metavar="NAME",
        help="GPU model where the source does not name it (a --topo-file without its .json), e.g. H100; its memory "
        "comes from the GPU catalog unless --gpu-memory-gb is given",
    )
    parser.add_argument("--gpu-memory-gb", type=float, metavar="GB", help="memory per GPU in GB (decimal)")
    parser.add_argument(
        "--exclude",
        type=parse_gpu_list,
        default=(),
        metavar="IDS",
        help="GPU ids (PCI order, as nvidia-smi numbers them) not to use, e.g. busy ones: 0,3",
    )


def topology_from_args(args: argparse.Namespace) -> Topology:
    return load_topology(
        getattr(args, "topo_file", None),
        getattr(args, "machine", None),
        getattr(args, "gpu", None),
        getattr(args, "gpu_memory_gb", None),
    )


def require_known_memory(topo: Topology) -> None:
    """Planning against 0 GB would print negative budgets: refuse with how to say the memory instead."""
    unknown = [g.index for g in topo.gpus if not g.memory_gb > 0]
    if unknown:
        what = "GPU memory" if all(g.name != "unknown GPU" for g in topo.gpus) else "GPU name and memory"
        raise UserError(f"{what} unknown for {topo.source}: {MEMORY_HINT}")
