"""What a GPU model brings to the wire: NVLink generation and link count, PCIe generation, peer-to-peer support.

The facts per part live in the GPU catalog (`generator.catalog.gpus`); this module merges them with what the input said.

`topo -m` text never names the GPU, so when no name is known the generation is inferred from the NV# counts and the
result says so in a warning.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from generator.catalog.gpus import find_gpu


@dataclass(frozen=True)
class Hardware:
    gpu_name: str | None = None
    """Marketing name, e.g. "NVIDIA H200"; None when the source does not say."""
    memory_gb: float | None = None
    """Total device memory per GPU in decimal GB; None when unknown."""
    nvlink_gen: int | None = None
    """NVLink generation (2 = V100, 3 = A100, 4 = H100/H200, 5 = B200); None for PCIe-only parts."""
    nvlink_total: int | None = None
    """Physical NVLink links per GPU (18 on H100/H200 SXM); 0 for parts without NVLink."""
    pcie_gen: int | None = None
    """PCIe generation of the GPU's x16 host link."""
    p2p: bool | None = None
    """False where the driver disables PCIe peer-to-peer (GeForce cards): NCCL then goes through host memory."""

    def renames(self, read_name: str | None) -> bool:
        """Whether this GPU name (--gpu) is another catalog part than the one a source read: memory read from an H200
        then says nothing about the H100 the user named. False where either name is unknown to the catalog."""
        part, read = find_gpu(self.gpu_name), find_gpu(read_name)
        return part is not None and read is not None and read != part

    def merged(self, other: Hardware) -> Hardware:
        """Fields of `self` win; `other` fills what `self` leaves as None."""
        known = {f.name: getattr(self, f.name) for f in fields(self)}
        return replace(other, **{k: v for k, v in known.items() if v is not None})


def lookup(gpu_name: str | None) -> Hardware:
    """The catalog's wiring facts for a GPU name; only the name when the catalog does not know the part."""
    part = find_gpu(gpu_name)
    if part is None:
        return Hardware(gpu_name=gpu_name or None)
    # The catalog's p2p=True is what the part allows, not what this machine's paths do, so only False is carried.
    return Hardware(
        gpu_name=gpu_name,
        nvlink_gen=part.nvlink_gen,
        nvlink_total=part.nvlink_links,
        pcie_gen=part.pcie_gen,
        p2p=False if not part.p2p else None,
    )


def infer_from_links(max_pair_nvlinks: int, max_gpu_nvlinks: int) -> Hardware:
    """Best guess from NV# counts alone: 13+ links on one GPU only exists from NVLink4 (18 links), 7-12 means
    NVLink3 (A100: 12), fewer means the V100 cube-mesh era (6 links). PCIe generation follows the NVLink era."""
    most = max(max_pair_nvlinks, max_gpu_nvlinks)
    if most >= 13:
        return Hardware(nvlink_gen=4, nvlink_total=18, pcie_gen=5)
    if most >= 7:
        return Hardware(nvlink_gen=3, nvlink_total=12, pcie_gen=4)
    if most >= 1:
        return Hardware(nvlink_gen=2, nvlink_total=6, pcie_gen=3)
    return Hardware(nvlink_total=0, pcie_gen=4)
