"""Topology engine: which GPUs are joined by what wire, and what that wire costs.

Public API (other subpackages code against these names):
load_topology, parse_topo_matrix, subset_busbw_gbps, islands, is_clique, best_subset, Selection, order_for_hsdp,
REFERENCE_MACHINES, add_topology_args, topology_from_args. GPU ids are always PCI bus order.
"""

from __future__ import annotations

from generator.topology.bandwidth import host_path_busbw_gbps, subset_busbw_gbps
from generator.topology.build import build_topology
from generator.topology.cli_args import add_topology_args, parse_gpu_list, require_known_memory, topology_from_args
from generator.topology.detect import load_topology
from generator.topology.islands import is_clique, is_switched, island_of, islands
from generator.topology.machines import DEFAULT_MACHINE, REFERENCE_MACHINES, load_machine
from generator.topology.report import BANDWIDTH_NOTE, DEVICE_ORDER_NOTE, topology_json
from generator.topology.smi_text import parse_matrix
from generator.topology.subsets import Selection, best_subset, check_exclude, order_for_hsdp
from generator.topology.types import Gpu, Link, Topology


def parse_topo_matrix(text: str, source: str = "text") -> Topology:
    """`nvidia-smi topo -m` text -> Topology. Bad input raises UserError naming what and where."""
    return build_topology(parse_matrix(text), source)


__all__ = [
    "BANDWIDTH_NOTE",
    "DEFAULT_MACHINE",
    "DEVICE_ORDER_NOTE",
    "REFERENCE_MACHINES",
    "Gpu",
    "Link",
    "Selection",
    "Topology",
    "add_topology_args",
    "best_subset",
    "check_exclude",
    "host_path_busbw_gbps",
    "is_clique",
    "is_switched",
    "island_of",
    "islands",
    "load_machine",
    "load_topology",
    "order_for_hsdp",
    "parse_gpu_list",
    "parse_topo_matrix",
    "require_known_memory",
    "subset_busbw_gbps",
    "topology_from_args",
    "topology_json",
]
