"""Micro-batch, gradient accumulation and activation checkpointing options for a given number of GPUs.

The global batch (sequences per optimizer step over all GPUs) is what the user's recipe is tuned for, so it stays fixed
when the GPU count changes; accumulation absorbs the difference. A global batch that cannot be split evenly is an
error with suggestions, never silently rounded: rounding would change the recipe's learning dynamics.
"""

from __future__ import annotations

from dataclasses import dataclass

from generator.plan.types import PlanRequest

MICRO_BATCHES = (8, 4, 2, 1)
"""Tried when the user gives no micro-batch: powers of two, largest first (8 is where per-GPU gains level off)."""


@dataclass(frozen=True)
class BatchOption:
    micro_batch: int
    grad_accum: int
    grad_checkpointing: bool
    global_batch: int


def batch_options(request: PlanRequest, num_gpus_total: int) -> tuple[list[BatchOption], str | None]:
    """Every (micro-batch, checkpointing) pair worth estimating, or ([], why none) when the global batch won't split."""
    ckpt = {"on": (True,), "off": (False,), "auto": (False, True)}[request.grad_checkpointing]
    micros = (request.micro_batch,) if request.micro_batch is not None else MICRO_BATCHES
    out: list[BatchOption] = []
    for micro in micros:
        if request.global_batch is None:
            accum, global_batch = 1, micro * num_gpus_total
        else:
            if request.global_batch % (micro * num_gpus_total):
                continue
            accum, global_batch = request.global_batch // (micro * num_gpus_total), request.global_batch
        out.extend(BatchOption(micro, accum, c, global_batch) for c in ckpt)
    if out:
        return out, None
    return [], split_hint(request.global_batch, request.micro_batch, num_gpus_total)


def split_hint(global_batch: int, micro: int | None, num_gpus: int) -> str:
    """Why `global_batch` cannot be split over `num_gpus` GPUs, and the nearest values that can."""
    step = (micro or 1) * num_gpus
    lower, upper = (global_batch // step) * step, (global_batch // step + 1) * step
    near = f"--global-batch {upper}" if lower == 0 else f"--global-batch {lower} or {upper}"
    if micro is None:
        return f"global batch {global_batch} is not a multiple of {num_gpus} GPUs; use {near}"
    per_gpu = global_batch // num_gpus
    other = (
        f"or a --micro-batch that divides {per_gpu}"
        if global_batch % num_gpus == 0
        else "or a --num-gpus that divides it"
    )
    what = f"micro-batch {micro} x {num_gpus} GPUs = {step}"
    return f"global batch {global_batch} is not a multiple of {what}; use {near}, {other}"
