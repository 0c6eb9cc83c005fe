"""The per-step JSONL both bench scripts write: the fields `generator/trial/metrics.read_steps` and
`bench/run_matrix.summarise_log` read, counted the way train.py counts them.

One line per optimizer step (rank 0 writes, every rank takes part in the memory gather):
    step, loss, step_time_s, tokens_per_s_per_gpu, mfu (null without a known GPU), max_mem_allocated_gb and
    max_mem_reserved_gb (one value per rank, torch.cuda.max_memory_* / 1e9; null on CPU), plus lr and grad_norm.
Then one `{"event": "summary", ...}` line. A `{"event": "start", ...}` line first records what the script actually ran
with (optimizer implementation, parameter dtype, DDP settings), read off the live objects.

Tokens per step per GPU = micro_batch x grad_accum x seq_len, as train.py counts: the scripts feed blocks of exactly
seq_len tokens, so this is the real count.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from pathlib import Path

from training.estimates import gpu_peak_tflops  # the same MFU denominator as train.py's logs


def tokens_per_step_per_gpu(micro_batch: int, grad_accum: int, seq_len: int) -> int:
    return micro_batch * grad_accum * seq_len


def flops_per_token(config, model_name: str, seq_len: int) -> float | None:
    """The estimator's 6N + 12*L*h*s, so MFU here means what it means in train.py's logs; None if it cannot size it."""
    try:
        from generator.model import flops_per_token as est_flops
        from generator.model import spec_from_config

        return float(est_flops(spec_from_config(config.to_dict(), model_name), seq_len))
    except Exception:
        return None


def sync() -> None:
    """Wait for queued GPU work, so a wall-clock interval covers the step's kernels."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def memory_per_rank() -> dict:
    """Peak allocated / reserved GB of every rank (a collective under torch.distributed: call it on all ranks)."""
    import torch

    if not torch.cuda.is_available():
        return {"max_mem_allocated_gb": None, "max_mem_reserved_gb": None}
    mine = torch.tensor(
        [torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()], device="cuda", dtype=torch.float64
    )
    every = [mine]
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        every = [torch.empty_like(mine) for _ in range(torch.distributed.get_world_size())]
        torch.distributed.all_gather(every, mine)
    return {
        "max_mem_allocated_gb": [round(float(t[0]) / 1e9, 3) for t in every],
        "max_mem_reserved_gb": [round(float(t[1]) / 1e9, 3) for t in every],
    }


def ddp_settings(model) -> dict | None:
    """What DDP was really built with (None when the model is not DDP-wrapped, e.g. FSDP2 or one process)."""
    from torch.nn.parallel import DistributedDataParallel

    if not isinstance(model, DistributedDataParallel):
        return None
    return {
        "find_unused_parameters": model.find_unused_parameters,
        "gradient_as_bucket_view": model.gradient_as_bucket_view,
        "bucket_cap_mb": model.bucket_bytes_cap / (1024 * 1024),
        "broadcast_buffers": model.broadcast_buffers,
        "static_graph": model.static_graph,
    }


def optimizer_settings(optimizer) -> dict:
    """Class and implementation of the optimizer under any Accelerate wrapper. foreach/fused None means torch picks
    at the first step (foreach on CUDA, see docs/scripts.md)."""
    inner = optimizer
    # Accelerate wraps once; under DeepSpeed its wrapper holds the ZeRO optimizer, which holds the torch one and has
    # no `defaults` of its own.
    while not hasattr(inner, "defaults") and hasattr(inner, "optimizer"):
        inner = inner.optimizer
    d = inner.defaults
    return {
        "optimizer": f"{type(inner).__module__}.{type(inner).__name__}",
        "fused": d.get("fused"),
        "foreach": d.get("foreach"),
        "adamw_impl": _adam_impl(inner),
        # per group: the Trainer splits decay / no-decay groups, and foreach temporaries are per group
        "param_group_sizes": [sum(p.numel() for p in g["params"] if p.requires_grad) for g in inner.param_groups],
        "weight_decay": [g.get("weight_decay") for g in inner.param_groups],
        "betas": list(d["betas"]) if "betas" in d else None,
        "eps": d.get("eps"),
    }


def _adam_impl(optimizer) -> str | None:
    """fused | foreach | for-loop, as torch.optim.adam.adam() will pick it for these parameters (its rule when neither
    flag is given: foreach if every parameter is a plain or DTensor on a foreach device, never fused)."""
    d = optimizer.defaults
    if d.get("fused"):
        return "fused"
    if d.get("foreach") is not None:
        return "foreach" if d["foreach"] else "for-loop"
    try:
        from torch.optim.optimizer import _default_to_fused_or_foreach

        params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
        _, foreach = _default_to_fused_or_foreach(params, bool(d.get("differentiable")), use_fused=False)
    except Exception:  # a private torch helper: report nothing rather than fail a training run
        return None
    return "foreach" if foreach else "for-loop"


def trainer_facts(trainer, targs) -> dict:
    """What a transformers Trainer (TRL's SFTTrainer) really runs with, read off the live objects once it has
    prepared the model and optimizer (the first on_step_begin): both Trainer-side step logs start with these."""
    return dict(
        world_size=targs.world_size,
        grad_accum=targs.gradient_accumulation_steps,
        micro_batch=targs.per_device_train_batch_size,
        distributed_type=str(trainer.accelerator.distributed_type),
        mixed_precision=trainer.accelerator.mixed_precision,
        grad_checkpointing=bool(targs.gradient_checkpointing),
        padding_free=getattr(trainer, "padding_free", None),
        attn_implementation=getattr(trainer.model.config, "_attn_implementation", None),
        liger=bool(getattr(targs, "use_liger_kernel", False)),
        optim=str(targs.optim),
        ddp=ddp_settings(trainer.model_wrapped),
        **optimizer_settings(trainer.optimizer),
        **param_dtypes(trainer.model_wrapped),
    )


def param_dtypes(model) -> dict:
    """Trainable and frozen parameter dtypes after prepare (e.g. FSDP2 under bf16 upcasts trainable ones to fp32)."""
    trainable, frozen = set(), set()
    for p in model.parameters():
        (trainable if p.requires_grad else frozen).add(str(p.dtype).replace("torch.", ""))
    return {"trainable_param_dtypes": sorted(trainable), "frozen_param_dtypes": sorted(frozen)}


class StepLog:
    """Rank 0 appends JSON lines to `path`; every call is safe on any rank (others write nothing)."""

    def __init__(self, path: str | Path, enabled: bool, tokens_per_step: int, flops: float | None):
        self.enabled, self.tokens, self.flops = enabled, tokens_per_step, flops
        self.peak = gpu_peak_tflops()
        self.path = Path(path)
        self.times: list[float] = []
        self.losses: list[float] = []
        self.tokens_seen: list[float] = []
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text("")

    def _write(self, record: dict) -> None:
        if self.enabled:
            with open(self.path, "a") as fh:
                fh.write(json.dumps(record) + "\n")

    def start(self, **facts) -> None:
        self._write({"event": "start", **facts})

    def step(
        self, step: int, loss: float, step_time_s: float, memory: dict, tokens: float | None = None, **extra
    ) -> None:
        """`tokens`: this step's tokens per GPU when they vary (TRL's packing); None: the fixed count."""
        tokens = self.tokens if tokens is None else tokens
        tps = tokens / step_time_s if step_time_s > 0 else 0.0
        self.tokens_seen.append(tokens)
        self.times.append(step_time_s)
        self.losses.append(loss)
        self._write(
            {
                "step": step,
                "loss": loss,
                "step_time_s": round(step_time_s, 4),
                "tokens_per_s_per_gpu": tps,
                "mfu": self.flops * tps / (self.peak * 1e12) if self.flops and self.peak else None,
                **memory,
                **{k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in extra.items()},
            }
        )

    def summary(self, memory: dict, **extra) -> None:
        steady = self.times[1:] or self.times  # the first step carries allocator warm-up and lazy initialisation
        step_s = statistics.median(steady) if steady else None
        counted = self.tokens_seen[1:] or self.tokens_seen
        tokens = statistics.median(counted) if counted else self.tokens
        tps = tokens / step_s if step_s else None
        allocated, reserved = memory["max_mem_allocated_gb"], memory["max_mem_reserved_gb"]
        self._write(
            {
                "event": "summary",
                "steps": len(self.times),
                "first_loss": self.losses[0] if self.losses else None,
                "final_loss": self.losses[-1] if self.losses else None,
                "median_step_s": step_s,
                "tokens_per_s_per_gpu": tps,
                "mfu": self.flops * tps / (self.peak * 1e12) if tps and self.flops and self.peak else None,
                "peak_mem_allocated_gb": max(allocated) if allocated else None,
                "peak_mem_reserved_gb": max(reserved) if reserved else None,
                "time": time.time(),
                **extra,
            }
        )
