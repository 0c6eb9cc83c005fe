"""Inter-node bandwidth: where the planner gets it, and defaults for common fabrics when nothing better is known.

The numbers below are nominal line rates per machine (all NICs together) times an assumed 80% all-reduce efficiency.
They are predictions, not measurements: pass `--inter-node-gbps` with a measured nccl-tests `all_reduce_perf` busbw
between two of your nodes whenever you have one.
"""

from __future__ import annotations

from dataclasses import dataclass

ALLREDUCE_EFFICIENCY = 0.8
"""Share of line rate an inter-node all-reduce reaches (protocol overhead; nccl-tests#212 reports ~20% on NVLink)."""


@dataclass(frozen=True)
class Fabric:
    line_rate_gbps: float
    """Nominal line rate per machine, GB/s (all NICs together)."""
    what: str
    """What the preset stands for, with its source."""

    @property
    def busbw_gbps(self) -> float:
        return self.line_rate_gbps * ALLREDUCE_EFFICIENCY


FABRICS: dict[str, Fabric] = {
    # DGX/HGX H100 and H200 design: eight ConnectX-7 NDR 400 Gb/s NICs, one per GPU (NVIDIA DGX H100 user guide).
    "ib-ndr-x8": Fabric(8 * 50.0, "8x InfiniBand NDR 400 Gb/s per node (DGX/HGX H100/H200 design)"),
    # One NDR port: 400 Gb/s = 50 GB/s (InfiniBand Trade Association NDR rate).
    "ib-ndr": Fabric(50.0, "1x InfiniBand NDR 400 Gb/s per node"),
    # One HDR port: 200 Gb/s = 25 GB/s (the A100-era ConnectX-6 rate).
    "ib-hdr": Fabric(25.0, "1x InfiniBand HDR 200 Gb/s per node"),
    "roce-400g": Fabric(50.0, "1x 400 GbE RoCE per node"),
    "roce-100g": Fabric(12.5, "1x 100 GbE RoCE per node"),
    # Plain cloud Ethernet without RDMA; NCCL falls back to sockets, which rarely reaches line rate.
    "eth-25g": Fabric(3.125, "1x 25 GbE (TCP sockets) per node"),
}
DEFAULT_FABRIC = "ib-ndr"
"""Assumed when a multi-node plan has no bandwidth from the user or the topology: one NDR port, a middle ground."""


def inter_node_gbps(
    requested: float | None, topology_gbps: float | None, fabric: str | None, num_machines: int
) -> tuple[float | None, str, str | None]:
    """(bus bandwidth between machines, where it came from, warning or None). None bandwidth for one machine."""
    if num_machines <= 1:
        return None, "", None
    if requested is not None:
        return requested, f"{requested:g} GB/s between machines (from --inter-node-gbps)", None
    if fabric is not None:
        f = FABRICS[fabric]
        return f.busbw_gbps, f"{f.busbw_gbps:g} GB/s between machines (predicted for --fabric {fabric}: {f.what})", None
    if topology_gbps is not None:
        return topology_gbps, f"{topology_gbps:g} GB/s between machines (from the topology's NICs)", None
    f = FABRICS[DEFAULT_FABRIC]
    warning = (
        f"inter-node bandwidth unknown: assumed {f.busbw_gbps:g} GB/s ({f.what}); pass --inter-node-gbps with a "
        f"measured all-reduce busbw, or --fabric {'|'.join(FABRICS)}"
    )
    return f.busbw_gbps, f"{f.busbw_gbps:g} GB/s between machines (assumed: {f.what})", warning
