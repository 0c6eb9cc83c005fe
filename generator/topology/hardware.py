"""What a GPU model brings to the wire: NVLink generation and link count, PCIe generation, peer-to-peer support.

`topo -m` text never names the GPU, so when no name is known the generation is inferred from the NV# counts and the
result says so in a warning.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace


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

    def merged(self, other: Hardware) -> Hardware:
        """Fields of `self` win; `other` fills what `self` leaves as None."""
        known = {f.name: getattr(self, f.name) for f in fields(self)}
        return replace(other, **{k: v for k, v in known.items() if v is not None})


# Lower-cased name fragment -> what the part has. First match wins, so specific names come before their family.
# Sources: NVIDIA datasheets (V100: 6 NVLink2 links / 300 GB/s; A100: 12 NVLink3 / 600 GB/s, PCIe Gen4;
# H100/H200 SXM: 18 NVLink4 / 900 GB/s, PCIe Gen5; H100 NVL / H200 NVL: NVLink bridges, 18 links on H200 NVL;
# B200: 18 NVLink5 / 1.8 TB/s; L40S / L40 / RTX 4090: no NVLink, PCIe Gen4). GeForce P2P: NVIDIA disables PCIe
# peer-to-peer on RTX 40xx in the driver, which is why Accelerate forces NCCL_P2P_DISABLE on old drivers.
GPU_FAMILIES: tuple[tuple[str, Hardware], ...] = (
    ("gb200", Hardware(nvlink_gen=5, nvlink_total=18, pcie_gen=6)),
    ("b200", Hardware(nvlink_gen=5, nvlink_total=18, pcie_gen=6)),
    ("h200 nvl", Hardware(nvlink_gen=4, nvlink_total=18, pcie_gen=5)),
    ("gh200", Hardware(nvlink_gen=4, nvlink_total=18, pcie_gen=5)),
    ("h200", Hardware(nvlink_gen=4, nvlink_total=18, pcie_gen=5)),
    ("h100 nvl", Hardware(nvlink_gen=4, nvlink_total=12, pcie_gen=5)),
    ("h100 pcie", Hardware(nvlink_gen=4, nvlink_total=12, pcie_gen=5)),
    ("h800", Hardware(nvlink_gen=4, nvlink_total=8, pcie_gen=5)),
    ("h100", Hardware(nvlink_gen=4, nvlink_total=18, pcie_gen=5)),
    ("a800", Hardware(nvlink_gen=3, nvlink_total=8, pcie_gen=4)),
    ("a100", Hardware(nvlink_gen=3, nvlink_total=12, pcie_gen=4)),
    ("v100", Hardware(nvlink_gen=2, nvlink_total=6, pcie_gen=3)),
    ("l40", Hardware(nvlink_total=0, pcie_gen=4)),
    ("rtx 6000 ada", Hardware(nvlink_total=0, pcie_gen=4)),
    ("rtx pro 6000", Hardware(nvlink_total=0, pcie_gen=5)),
    ("rtx 5090", Hardware(nvlink_total=0, pcie_gen=5, p2p=False)),
    ("rtx 4090", Hardware(nvlink_total=0, pcie_gen=4, p2p=False)),
    ("rtx 3090", Hardware(nvlink_gen=3, nvlink_total=4, pcie_gen=4, p2p=False)),
    ("a10", Hardware(nvlink_total=0, pcie_gen=4)),
    ("t4", Hardware(nvlink_total=0, pcie_gen=3)),
)


def lookup(gpu_name: str | None) -> Hardware:
    """Known facts for a GPU name (case-insensitive fragment match); an empty Hardware when the name is unknown."""
    if not gpu_name:
        return Hardware()
    low = gpu_name.lower()
    for fragment, hw in GPU_FAMILIES:
        if fragment in low:
            return replace(hw, gpu_name=gpu_name)
    return Hardware(gpu_name=gpu_name)


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
