"""What the topology engine knows about one machine. Every source (NVML, `nvidia-smi topo -m`, a file, a bundled
reference machine) produces the same `Topology`.

GPU indices are always PCI bus order (nvidia-smi / NVML numbering). CUDA numbers fastest-first by default, so every
launch command this tool prints sets CUDA_DEVICE_ORDER=PCI_BUS_ID.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Path kinds as nvidia-smi names them, best first. "NV" is NVLink (with a link count); legacy "SOC" is read as "SYS".
PATH_KINDS = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS")


@dataclass(frozen=True)
class Gpu:
    index: int
    """PCI-order index, as nvidia-smi prints it."""
    name: str
    """Marketing name, e.g. "NVIDIA H200"."""
    memory_gb: float
    """Total device memory in decimal GB (1e9 bytes)."""
    numa: int | None = None
    """NUMA node the GPU hangs off, when known."""
    cpu_affinity: str | None = None
    """CPU list as nvidia-smi prints it ("0-31", "0-15,32-47")."""
    pci_bus_id: str | None = None
    """e.g. "00000000:18:00.0"; None for topologies read from `topo -m` text."""
    nvlink_total: int | None = None
    """Physical NVLink links on this GPU when known (18 on H100/H200 SXM)."""


@dataclass(frozen=True)
class Link:
    kind: str
    """One of PATH_KINDS."""
    nvlinks: int = 0
    """Bonded NVLink count for kind "NV" (NV18 -> 18), else 0."""
    busbw_gbps: float = 0.0
    """Expected all-reduce bus bandwidth (nccl-tests definition, GB/s) of a 2-GPU job on this pair."""
    p2p: bool | None = None
    """Peer-to-peer status when known (NVML / `topo -p2p`); None when unknown."""


MACHINE_SOURCE = "machine:"
"""Topology.source's prefix for a bundled catalog machine's topology (generator/machines/)."""


@dataclass(frozen=True)
class Topology:
    gpus: tuple[Gpu, ...]
    links: dict[tuple[int, int], Link]
    """Keyed (i, j) with i < j, one entry per GPU pair."""
    source: str
    """Where it came from: "nvml", "nvidia-smi", "file:PATH", "machine:NAME"."""
    nics: tuple[str, ...] = ()
    """NIC names from the topology (NIC Legend or column headers), if any."""
    nic_numa: dict[str, int] = field(default_factory=dict)
    """NUMA node per NIC where known."""
    warnings: tuple[str, ...] = ()
    """Things the reader noticed but could work around (fused columns, missing legend...)."""
    inter_node_gbps: float | None = None
    """Bus bandwidth between machines when the topology describes a cluster (NIC speed), else None."""
    pcie_gen: int | None = None
    """PCIe generation of the GPUs' host links when known (5 on H200); sets the host-memory path bandwidth."""

    def link(self, i: int, j: int) -> Link:
        if i == j:
            raise ValueError("a GPU has no link to itself")
        return self.links[(i, j) if i < j else (j, i)]

    @property
    def from_catalog(self) -> bool:
        """A bundled catalog machine's topology (`--machine`, or the reference machine shown when no GPU is detected),
        not one read from this machine's GPUs or from a file: it holds no measured memory or links of this machine."""
        return self.source.startswith(MACHINE_SOURCE)

    @property
    def indices(self) -> tuple[int, ...]:
        return tuple(g.index for g in self.gpus)

    def gpu(self, index: int) -> Gpu:
        for g in self.gpus:
            if g.index == index:
                return g
        raise KeyError(index)
