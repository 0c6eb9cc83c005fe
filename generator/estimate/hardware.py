"""The estimator's view of a GPU: dense bf16 peak (the MFU denominator) and memory bandwidth, from the GPU catalog.

A GPU the catalog does not know gets a deliberately modest guess so unknown hardware is not over-promised; the planner
says so out loud (`unknown_gpu_warning`).
"""

from __future__ import annotations

from dataclasses import dataclass

from generator.catalog.gpus import find_gpu


@dataclass(frozen=True)
class GpuRates:
    dense_bf16_tflops: float
    """Dense bf16 tensor-core peak (fp16 for GPUs without bf16), TFLOP/s."""
    hbm_tbps: float
    """Device-memory bandwidth, TB/s."""
    source: str
    """Where the numbers come from."""


UNKNOWN_GPU = GpuRates(100.0, 1.0, "unknown GPU: assumed 100 TFLOP/s, 1 TB/s")


def gpu_rates(gpu_name: str) -> GpuRates:
    """Rates for a GPU name as NVML reports it ("NVIDIA H200", "NVIDIA A100-SXM4-80GB"); UNKNOWN_GPU if unlisted."""
    part = find_gpu(gpu_name)
    if part is None:
        return UNKNOWN_GPU
    return GpuRates(part.dense_bf16_tflops, part.memory_tbps, f"{part.sources.tflops}; {part.sources.bandwidth}")


def gpu_known(gpu_name: str) -> bool:
    return find_gpu(gpu_name) is not None


def gpu_peak_tflops(gpu_name: str) -> float:
    """Dense bf16 peak TFLOP/s for MFU (989.4 for H100/H200 SXM)."""
    return gpu_rates(gpu_name).dense_bf16_tflops


def unknown_gpu_warning(gpu_name: str) -> str | None:
    """One line for plan output when the GPU is not in the catalog: what was assumed and how to fix it."""
    if gpu_known(gpu_name):
        return None
    return (
        f"GPU {gpu_name!r} is not in the GPU catalog: speed assumes {UNKNOWN_GPU.dense_bf16_tflops:g} TFLOP/s dense "
        f"bf16 and {UNKNOWN_GPU.hbm_tbps:g} TB/s memory bandwidth, a deliberately low guess; add the part to "
        "generator/catalog/gpus.py for real predictions"
    )
