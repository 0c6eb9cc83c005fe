"""Size of one training checkpoint on disk: train.py checks free space with it before saving."""

from __future__ import annotations

from generator.catalog import strategies as catalog
from generator.estimate.states import load_bytes, trainable_params
from generator.estimate.types import Workload
from generator.model.types import ModelSpec


def checkpoint_size_gb(model: ModelSpec, workload: Workload, strategy: str) -> float:
    """Disk space one accelerator.save_state takes, all ranks together, decimal GB.

    Full fine-tune: the weights in their stored dtype (fp32 masters for FSDP/DeepSpeed and fp32-loaded DDP, else bf16)
    + AdamW states (8 B/param, 2 for 8-bit) + for DeepSpeed the bf16 module weights it saves beside its fp32
    partitions. LoRA/QLoRA: the adapters and their optimizer states only."""
    t = trainable_params(model, workload)
    adam = 2.0 if workload.optimizer == "adamw8bit" else 8.0
    if workload.method != "full":
        return t * (4.0 + adam) / 1e9
    framework = catalog.strategy(strategy).framework
    if framework == "ddp":
        wb = load_bytes(workload)
        return t * (wb + (2.0 if workload.optimizer == "adamw8bit" else 2 * wb)) / 1e9
    extra = 2.0 if framework == "deepspeed" else 0.0
    return t * (4.0 + adam + extra) / 1e9
