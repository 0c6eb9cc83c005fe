"""The `topo --json` object (stable interface: other tools read it)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from generator.topology.islands import islands
from generator.topology.subsets import Selection, order_for_hsdp
from generator.topology.types import Topology

DEVICE_ORDER_NOTE = (
    "GPU ids are PCI bus order (as nvidia-smi numbers them); set CUDA_DEVICE_ORDER=PCI_BUS_ID at launch so CUDA "
    "uses the same numbering."
)
BANDWIDTH_NOTE = (
    "busbw_gbps values are predicted all-reduce bus bandwidths (nccl-tests definition) from per-generation line "
    "rates, calibrated on a measured 2x H200 SXM pair (338.6 GB/s NVLink, 28.6 GB/s host path) and published H200 "
    "NVL figures; run `python -m generator probe` to measure them."
)


def _finite(x: float) -> float | None:
    return round(x, 1) if math.isfinite(x) else None


def topology_json(topo: Topology, selection: Selection | None = None, exclude: Sequence[int] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {
        "source": topo.source,
        "device_order": "PCI_BUS_ID",
        "gpus": [
            {
                "index": g.index,
                "name": g.name,
                "memory_gb": g.memory_gb,
                "numa": g.numa,
                "cpu_affinity": g.cpu_affinity,
                "pci_bus_id": g.pci_bus_id,
                "nvlink_total": g.nvlink_total,
            }
            for g in topo.gpus
        ],
        "links": {
            f"{i}-{j}": {"kind": link.kind, "nvlinks": link.nvlinks, "busbw_gbps": link.busbw_gbps, "p2p": link.p2p}
            for (i, j), link in sorted(topo.links.items())
        },
        "islands": islands(topo),
        "pcie_gen": topo.pcie_gen,
        "nics": list(topo.nics),
        "nic_numa": dict(topo.nic_numa),
        "inter_node_gbps": topo.inter_node_gbps,
        "excluded": sorted(set(exclude)),
        "warnings": list(topo.warnings),
        "notes": [DEVICE_ORDER_NOTE, BANDWIDTH_NOTE],
    }
    if selection is not None:
        order, shard = order_for_hsdp(topo, selection.gpu_ids)
        out.update(
            {
                "selected": list(selection.gpu_ids),
                "bottleneck_busbw_gbps": _finite(selection.busbw_gbps),
                "spans_islands": selection.spans_islands,
                "reason": selection.reason,
                "hsdp_order": list(order),
                "hsdp_shard_size": shard,
                "cuda_visible_devices": ",".join(map(str, selection.gpu_ids)),
            }
        )
    return out
