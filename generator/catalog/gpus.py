"""The GPU catalog: one entry per NVIDIA part with its compute peak, memory, memory bandwidth and wiring.

Topology (link rates), the estimator (step time, MFU) and check all read this one table through `find_gpu`.
Dense means without 2:4 sparsity: NVIDIA datasheets headline the sparse figure, exactly twice the dense one, so
"sparse/2" in a source means the datasheet number halved. Sources name the NVIDIA document a number comes from;
numbers derived from another column or taken from a third party say so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

FP8_ARCHITECTURES = ("Hopper", "Ada", "Blackwell")
"""Architectures whose tensor cores run fp8 (Transformer Engine / torchao fp8 matmuls)."""
FP8_DIM_MULTIPLE = 16
"""torch._scaled_mm's alignment: train.py's float8 filter converts a Linear only when both dims divide by it."""


def fp8_aligned(*dims: int) -> bool:
    """Whether a GEMM of these dims can run in float8 (FP8_DIM_MULTIPLE)."""
    return all(d % FP8_DIM_MULTIPLE == 0 for d in dims)


@dataclass(frozen=True)
class Sources:
    """Where each number of a GpuPart comes from."""

    tflops: str
    """Source of dense_bf16_tflops."""
    memory: str
    """Source of memory_gb (and reported_memory_gb where given)."""
    bandwidth: str
    """Source of memory_tbps."""
    links: str
    """Source of nvlink_gen, nvlink_links, pcie_gen and p2p."""


@dataclass(frozen=True)
class GpuPart:
    """One GPU product as NVIDIA sells it (one form factor / memory size where those change the numbers)."""

    name: str
    """Marketing name, e.g. "H100 SXM"."""
    match: tuple[str, ...]
    """Lower-case name fragments matched as whole words in the NVML name ("-" read as a space); the longest fragment
    found across the catalog wins, so "h200 nvl" beats "h200" whatever the order of the table."""
    architecture: str
    """"Volta", "Turing", "Ampere", "Hopper", "Ada" or "Blackwell"."""
    dense_bf16_tflops: float
    """Dense bf16 tensor-core peak with fp32 accumulate (fp16 where the part has no bf16), TFLOP/s: the MFU
    denominator."""
    memory_gb: float
    """Device memory as the datasheet states it, GB."""
    memory_tbps: float
    """Device-memory (HBM / GDDR) bandwidth, TB/s."""
    nvlink_gen: int | None
    """NVLink generation (2 = V100 ... 5 = Blackwell); None where the part has no NVLink."""
    nvlink_links: int
    """Physical NVLink links per GPU (18 on H100/H200 SXM); 0 without NVLink."""
    pcie_gen: int
    """PCIe generation of the GPU's x16 host link."""
    p2p: bool
    """False where the driver disables PCIe peer-to-peer (GeForce cards): NCCL then goes through host memory."""
    sources: Sources
    """Where each number comes from."""
    reported_memory_gb: float | None = None
    """Total device memory in decimal GB as NVML / torch report it, where a capture of the part is cited (the datasheet
    figure is in binary units, so this is larger); None where no capture is at hand."""

    @property
    def read_memory_gb(self) -> float:
        """Device memory as a topology reads it (NVML's figure where cited, else the datasheet's)."""
        return self.reported_memory_gb or self.memory_gb

    @property
    def fp8(self) -> bool:
        """Tensor cores run fp8."""
        return self.architecture in FP8_ARCHITECTURES

    @property
    def bf16(self) -> bool:
        """Tensor cores run bf16 (Volta and Turing have fp16 only)."""
        return self.architecture not in ("Volta", "Turing")


def _src(datasheet: str, tflops: str = "", memory: str = "", bandwidth: str = "", links: str = "") -> Sources:
    """Sources where one datasheet gives most numbers; a non-empty argument overrides that field."""
    return Sources(tflops or datasheet, memory or datasheet, bandwidth or datasheet, links or datasheet)


H100_DS = "NVIDIA H100 Tensor Core GPU datasheet"
H200_DS = "NVIDIA H200 Tensor Core GPU datasheet"
A100_DS = "NVIDIA A100 Tensor Core GPU datasheet"
HGX_B200 = "NVIDIA HGX B200 / GB200 NVL72 specifications table (individual Blackwell GPU rows)"
ADA_WP = "NVIDIA Ada Lovelace GPU architecture whitepaper, appendix table"

GPUS: tuple[GpuPart, ...] = (
    # name, match, architecture, dense bf16 TFLOP/s, memory GB, memory TB/s, NVLink gen, links, PCIe gen, p2p
    # Blackwell data center: NVLink5, 18 links.
    GpuPart("B200", ("b200",), "Blackwell", 2250.0, 180, 7.7, 5, 18, 5, True,
            _src(HGX_B200, tflops=f"{HGX_B200}: 4.5 PFLOPS bf16 sparse/2",
                 links=f"{HGX_B200}: NVLink5 1.8 TB/s (18 links), PCIe Gen5 128 GB/s")),
    GpuPart("GB200", ("gb200",), "Blackwell", 2500.0, 186, 8.0, 5, 18, 6, True,
            _src(HGX_B200, tflops=f"{HGX_B200}: GB200 5 PFLOPS bf16 sparse/2",
                 links="NVIDIA GB200 NVL72 specifications: NVLink5 1.8 TB/s, PCIe Gen6 256 GB/s")),
    GpuPart("B300", ("b300",), "Blackwell", 2250.0, 288, 8.0, 5, 18, 6, True,
            _src("NVIDIA HGX B300 specifications", tflops="NVIDIA HGX B300 specifications: 36 PFLOPS bf16 sparse "
                 "per 8 GPUs -> 4.5 per GPU, /2", links="NVIDIA HGX B300: NVLink5 1.8 TB/s; PCIe Gen6 (ConnectX-8)")),
    # Hopper: NVLink4.
    GpuPart("H200 NVL", ("h200 nvl",), "Hopper", 835.5, 141, 4.8, 4, 18, 5, True,
            _src(f"{H200_DS} (NVL column)", tflops=f"{H200_DS} (NVL column): 1,671 bf16 sparse/2")),
    GpuPart("H200 SXM", ("h200",), "Hopper", 989.4, 141, 4.8, 4, 18, 5, True,
            _src(f"{H200_DS} (SXM column)", tflops=f"{H200_DS} (SXM column): 1,979 bf16 sparse/2",
                 memory=f"{H200_DS}: 141 GB; reported: 143771 MiB FB total in nvidia-smi -q of the measured H200 "
                 "(shared/topo/h200-sxm-2x-nvswitch.smi-q.txt)"),
            reported_memory_gb=150.75),
    GpuPart("GH200 (96 GB HBM3)", ("gh200",), "Hopper", 989.4, 96, 4.0, 4, 18, 5, True,
            _src("NVIDIA GH200 Grace Hopper Superchip datasheet", tflops="NVIDIA GH200 datasheet: 1,979 bf16 "
                 "sparse/2")),
    GpuPart("GH200 (144 GB HBM3e)", ("gh200 144g", "gh200 144gb"), "Hopper", 989.4, 144, 4.9, 4, 18, 5, True,
            _src("NVIDIA GH200 Grace Hopper Superchip datasheet (HBM3e)", tflops="NVIDIA GH200 datasheet: 1,979 "
                 "bf16 sparse/2")),
    GpuPart("H100 NVL", ("h100 nvl",), "Hopper", 835.5, 94, 3.9, 4, 12, 5, True,
            _src(f"{H100_DS} (NVL column)", tflops=f"{H100_DS} (NVL column): 1,671 bf16 sparse/2",
                 links=f"{H100_DS} (NVL column): NVLink bridge 600 GB/s (12 links), PCIe Gen5")),
    GpuPart("H100 PCIe", ("h100 pcie",), "Hopper", 756.5, 80, 2.0, 4, 12, 5, True,
            _src(f"{H100_DS} (PCIe column)", tflops=f"{H100_DS} (PCIe column): 1,513 bf16 sparse/2",
                 links=f"{H100_DS} (PCIe column): NVLink bridge 600 GB/s (12 links), PCIe Gen5")),
    GpuPart("H100 SXM", ("h100",), "Hopper", 989.4, 80, 3.35, 4, 18, 5, True,
            _src(f"{H100_DS} (SXM column)", tflops=f"{H100_DS} (SXM column): 1,979 bf16 sparse/2")),
    GpuPart("H800 SXM", ("h800",), "Hopper", 989.4, 80, 3.35, 4, 8, 5, True,
            _src("H100 SXM silicon sold with reduced NVLink: H100 datasheet (SXM column) for compute and memory",
                 links="NVIDIA H800 product brief: NVLink 400 GB/s (8 links)")),
    # Ampere data center: NVLink3.
    GpuPart("A100 SXM4 40GB", ("a100 sxm4 40gb",), "Ampere", 312.0, 40, 1.555, 3, 12, 4, True,
            _src(f"{A100_DS} (40GB SXM column)")),
    GpuPart("A100 SXM4 80GB", ("a100", "a100 sxm4 80gb"), "Ampere", 312.0, 80, 2.039, 3, 12, 4, True,
            _src(f"{A100_DS} (80GB SXM column)")),
    GpuPart("A100 PCIe 40GB", ("a100 pcie 40gb",), "Ampere", 312.0, 40, 1.555, 3, 12, 4, True,
            _src(f"{A100_DS} (40GB PCIe column)", links=f"{A100_DS}: PCIe parts pair over an NVLink bridge, "
                 "600 GB/s")),
    GpuPart("A100 PCIe 80GB", ("a100 80gb pcie", "a100 pcie 80gb"), "Ampere", 312.0, 80, 1.935, 3, 12, 4, True,
            _src(f"{A100_DS} (80GB PCIe column)", links=f"{A100_DS}: PCIe parts pair over an NVLink bridge, "
                 "600 GB/s")),
    GpuPart("A800 SXM4 80GB", ("a800",), "Ampere", 312.0, 80, 2.039, 3, 8, 4, True,
            _src("A100 silicon sold with reduced NVLink: A100 datasheet (80GB SXM column) for compute and memory",
                 links="NVIDIA A800 product brief: NVLink 400 GB/s (8 links)")),
    GpuPart("A10", ("a10",), "Ampere", 125.0, 24, 0.6, None, 0, 4, True,
            _src("NVIDIA A10 Tensor Core GPU datasheet", tflops="NVIDIA A10 datasheet: 125 bf16 dense (250 sparse)")),
    GpuPart("A10G", ("a10g",), "Ampere", 70.0, 24, 0.6, None, 0, 4, True,
            _src("AWS G5 instance specifications (24 GB GDDR6, 600 GB/s, per Baseten 'NVIDIA A10 vs A10G')",
                 tflops="UNSOURCED: NVIDIA publishes no A10G datasheet; Baseten's 'A10 vs A10G' says its tensor "
                 "throughput is below the A10's; 70 is the commonly quoted figure, not verified here",
                 links="AWS G5: PCIe Gen4 card without NVLink")),
    # Ada: no NVLink.
    GpuPart("L40S", ("l40s",), "Ada", 362.05, 48, 0.864, None, 0, 4, True,
            _src("NVIDIA L40S GPU datasheet", tflops="NVIDIA L40S datasheet: 362.05 bf16 dense (733 sparse)")),
    GpuPart("L40", ("l40",), "Ada", 181.05, 48, 0.864, None, 0, 4, True,
            _src("NVIDIA L40 GPU datasheet", tflops="NVIDIA L40 datasheet: 362.1 bf16 sparse/2")),
    GpuPart("L4", ("l4",), "Ada", 121.0, 24, 0.3, None, 0, 4, True,
            _src("NVIDIA L4 Tensor Core GPU datasheet", tflops="NVIDIA L4 datasheet: 242 bf16 sparse/2")),
    GpuPart("RTX 6000 Ada", ("rtx 6000 ada",), "Ada", 364.25, 48, 0.96, None, 0, 4, True,
            _src("NVIDIA RTX 6000 Ada Generation datasheet", tflops="derived: NVIDIA RTX 6000 Ada datasheet "
                 "1,457 TFLOPS fp8 sparse /4 (fp8 is twice bf16, as the L40S datasheet's columns show)")),
    GpuPart("GeForce RTX 4090", ("rtx 4090",), "Ada", 165.2, 24, 1.008, None, 0, 4, False,
            _src(ADA_WP, tflops=f"{ADA_WP}: 165.2 bf16 dense with fp32 accumulate",
                 links="NVIDIA GeForce RTX 4090 specifications (PCIe Gen4, no NVLink); GeForce drivers disable "
                 "PCIe peer-to-peer")),
    # Blackwell workstation / consumer.
    GpuPart("RTX PRO 6000 Blackwell", ("rtx pro 6000",), "Blackwell", 500.0, 96, 1.792, None, 0, 5, True,
            _src("NVIDIA RTX PRO 6000 Blackwell datasheet", tflops="derived: NVIDIA RTX PRO 6000 datasheet "
                 "4,000 AI TOPS (fp4 sparse) /8; third-party listing (hmc-tech.com) gives 503.8 with fp32 "
                 "accumulate")),
    GpuPart("GeForce RTX 5090", ("rtx 5090",), "Blackwell", 209.5, 32, 1.792, None, 0, 5, False,
            _src("NVIDIA GeForce RTX 5090 specifications", tflops="NVIDIA RTX Blackwell GPU architecture "
                 "whitepaper, appendix: 209.5 bf16 dense with fp32 accumulate (419 with fp16 accumulate)",
                 links="NVIDIA GeForce RTX 5090 specifications (PCIe Gen5, no NVLink); GeForce drivers disable "
                 "PCIe peer-to-peer")),
    # Older parts still found in clusters.
    GpuPart("GeForce RTX 3090", ("rtx 3090",), "Ampere", 71.0, 24, 0.936, 3, 4, 4, False,
            _src("NVIDIA Ampere GA102 GPU architecture whitepaper, appendix table",
                 tflops="NVIDIA GA102 whitepaper: 71 bf16 dense with fp32 accumulate",
                 links="NVIDIA GA102 whitepaper: NVLink3 bridge, 4 links (112.5 GB/s); GeForce drivers disable "
                 "PCIe peer-to-peer")),
    GpuPart("V100 SXM2", ("v100", "v100 sxm2"), "Volta", 125.0, 32, 0.9, 2, 6, 3, True,
            _src("NVIDIA V100 Tensor Core GPU datasheet (SXM2 column)", tflops="NVIDIA V100 datasheet (SXM2): "
                 "125 fp16 tensor (no bf16)", links="NVIDIA V100 datasheet: NVLink2 300 GB/s (6 links), PCIe Gen3")),
    GpuPart("V100 PCIe", ("v100 pcie",), "Volta", 112.0, 32, 0.9, None, 0, 3, True,
            _src("NVIDIA V100 Tensor Core GPU datasheet (PCIe column)", tflops="NVIDIA V100 datasheet (PCIe): "
                 "112 fp16 tensor (no bf16)")),
    GpuPart("T4", ("t4",), "Turing", 65.0, 16, 0.32, None, 0, 3, True,
            _src("NVIDIA T4 Tensor Core GPU datasheet", tflops="NVIDIA T4 datasheet: 65 fp16 mixed-precision "
                 "tensor (no bf16)")),
)  # fmt: skip


def _normalise(name: str) -> str:
    # "RTX4090" as typed reads as "rtx 4090", as NVML spells it.
    text = re.sub(r"(?<![a-z0-9])(rtx|gtx)(?=\d)", r"\1 ", name.lower())
    return " ".join(re.sub(r"[-_/]", " ", text).split())


_FRAGMENTS: tuple[tuple[re.Pattern[str], int, GpuPart], ...] = tuple(
    (re.compile(rf"(?<![a-z0-9]){re.escape(fragment)}(?![a-z0-9])"), len(fragment), part)
    for part in GPUS
    for fragment in part.match
)


@lru_cache(maxsize=256)
def find_gpu(name: str | None) -> GpuPart | None:
    """The catalog part for a GPU name as NVML / nvidia-smi / torch report it ("NVIDIA H100 80GB HBM3",
    "NVIDIA A100-SXM4-80GB", "Tesla T4"); the longest matching fragment wins; None when no part matches. Cached: a
    plan asks for the same name with every estimate."""
    if not name:
        return None
    text = _normalise(name)
    found = [(length, part) for pattern, length, part in _FRAGMENTS if pattern.search(text)]
    return max(found, key=lambda hit: hit[0])[1] if found else None
