"""Why "usable" GPU memory is less than the card's: said once, so the same card quoting two budgets (one GPU vs
several) carries its reason wherever a budget is printed."""

from __future__ import annotations

from generator.estimate.core import CUDA_CONTEXT_GB, NCCL_BUFFERS_GB


def usable_memory_text(gpu_memory_gb: float, headroom: float, num_gpus: int) -> str:
    """'24 GB less 10% kept free, 0.6 GB CUDA context and 0.5 GB NCCL buffers' (NCCL only with several GPUs)."""
    parts = [f"{headroom:.0%} kept free", f"{CUDA_CONTEXT_GB:g} GB CUDA context"]
    if num_gpus > 1:
        parts.append(f"{NCCL_BUFFERS_GB:g} GB NCCL buffers (multi-GPU jobs only)")
    return f"{gpu_memory_gb:g} GB less " + ", ".join(parts[:-1]) + " and " + parts[-1]
