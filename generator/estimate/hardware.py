"""Per-GPU-model peak rates: dense bf16 tensor TFLOP/s (the MFU denominator) and HBM bandwidth.

Dense means without 2:4 sparsity: NVIDIA datasheets headline the sparse figure, which is exactly twice the dense one.
Matching is by substring of the NVML / nvidia-smi name, most specific first ("H200 NVL" before "H200").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuRates:
    dense_bf16_tflops: float
    """Dense bf16 tensor-core peak (fp16 for GPUs without bf16), TFLOP/s."""
    hbm_tbps: float
    """Device-memory bandwidth, TB/s."""
    source: str
    """Where the numbers come from."""


# (name substring, rates). Order matters: the first substring found in the GPU name wins.
GPU_TABLE: tuple[tuple[str, GpuRates], ...] = (
    # H200 NVL datasheet: 1,671 TFLOPS bf16 with sparsity -> 835.5 dense; 4.8 TB/s.
    ("H200 NVL", GpuRates(835.5, 4.8, "NVIDIA H200 datasheet (NVL column), sparse/2")),
    # H200 SXM datasheet: 1,979 TFLOPS bf16 with sparsity -> 989.4 dense; 4.8 TB/s HBM3e.
    ("H200", GpuRates(989.4, 4.8, "NVIDIA H200 datasheet (SXM column), sparse/2")),
    # H100 NVL: 1,671 sparse -> 835.5; 3.9 TB/s. H100 PCIe: 1,513 sparse -> 756.5; 2.0 TB/s.
    ("H100 NVL", GpuRates(835.5, 3.9, "NVIDIA H100 datasheet (NVL column), sparse/2")),
    ("H100 PCIe", GpuRates(756.5, 2.0, "NVIDIA H100 datasheet (PCIe column), sparse/2")),
    # H100 SXM: 1,979 sparse -> 989.4; 3.35 TB/s. NVML calls it "NVIDIA H100 80GB HBM3".
    ("H100", GpuRates(989.4, 3.35, "NVIDIA H100 datasheet (SXM column), sparse/2")),
    ("H800", GpuRates(989.4, 3.35, "H100 SXM silicon with reduced NVLink (same tensor peak)")),
    # A100: 312 TFLOPS bf16 dense (A100 datasheet); HBM 2.039 TB/s (80GB SXM), 1.555 (40GB).
    ("A100-SXM4-40GB", GpuRates(312.0, 1.555, "NVIDIA A100 datasheet (40GB)")),
    ("A100", GpuRates(312.0, 2.039, "NVIDIA A100 datasheet (80GB SXM)")),
    ("A800", GpuRates(312.0, 2.039, "A100 silicon (same tensor peak)")),
    # L40S datasheet: 362.05 TFLOPS bf16 dense (733 sparse); 864 GB/s.
    ("L40S", GpuRates(362.05, 0.864, "NVIDIA L40S datasheet")),
    # L40 datasheet: 362.1 TFLOPS bf16 with sparsity -> 181.05 dense; 864 GB/s. Listed before "L4" (substring).
    ("L40", GpuRates(181.05, 0.864, "NVIDIA L40 datasheet, sparse/2")),
    # L4 datasheet: 242 sparse -> 121 dense; 300 GB/s.
    ("L4", GpuRates(121.0, 0.300, "NVIDIA L4 datasheet, sparse/2")),
    # Ada whitepaper (RTX 4090): 165.2 TFLOPS bf16 with fp32 accumulate, dense; 1,008 GB/s.
    ("RTX 4090", GpuRates(165.2, 1.008, "NVIDIA Ada Lovelace architecture whitepaper, appendix table")),
    # A10 datasheet: 125 TFLOPS bf16 dense (250 sparse); 600 GB/s.
    ("A10", GpuRates(125.0, 0.600, "NVIDIA A10 datasheet")),
    # V100 SXM2: 125 TFLOPS fp16 tensor (no bf16); 900 GB/s.
    ("V100", GpuRates(125.0, 0.900, "NVIDIA V100 datasheet (SXM2, fp16 tensor)")),
)

# Used when the GPU is not in the table: a deliberately modest guess so unknown hardware is not over-promised.
UNKNOWN_GPU = GpuRates(100.0, 1.0, "unknown GPU: assumed 100 TFLOP/s, 1 TB/s")


def gpu_rates(gpu_name: str) -> GpuRates:
    """Rates for a GPU name as NVML reports it ("NVIDIA H200", "NVIDIA A100-SXM4-80GB"); UNKNOWN_GPU if unlisted."""
    upper = gpu_name.upper()
    for key, rates in GPU_TABLE:
        if key.upper() in upper:
            return rates
    return UNKNOWN_GPU


def gpu_known(gpu_name: str) -> bool:
    return gpu_rates(gpu_name) is not UNKNOWN_GPU


def gpu_peak_tflops(gpu_name: str) -> float:
    """Dense bf16 peak TFLOP/s for MFU (989.4 for H100/H200 SXM)."""
    return gpu_rates(gpu_name).dense_bf16_tflops
