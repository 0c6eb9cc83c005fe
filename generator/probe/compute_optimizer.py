"""The optimizer step's memory-bound passes, timed for `probe --compute`'s HBM section: torch's fused AdamW and
clip_grad_norm_ over fp32 parameters split into tensors as a model's are. The table's stream rate stays the copy's
and the add's; these rows are recorded for the fit (bench/fit_compute.py) that prices the update and the clipping at
their own rates (bench/README.md, Next 4). torch is imported by the caller's process only."""

from __future__ import annotations

import torch

from generator.probe.clock import Clock

OPTIMIZER_PASS_BYTES = {"adamw_fused_fp32": 28, "clip_grad_norm_fp32": 12}
"""Bytes per fp32 parameter: fused AdamW reads parameter, gradient and both moments and writes parameter and moments
(28); clip_grad_norm_ reads each gradient for the foreach norm, then reads and writes it in the foreach multiply,
which torch runs whatever the norm (12). A full fine-tune's optimizer step, which the copy rate prices short: Mixtral
cut to 4 layers spent 49 ms in fused AdamW and 20 in clip_grad_norm_ a step (bench/README.md, 2026-12-04)."""
OPTIMIZER_TENSORS = 8
OPTIMIZER_PARAMS = 1 << 28
"""256M fp32 parameters (1 GiB): the size bench/results/optimizer-rows-h200-2026-12-04-b.json was timed at."""


def optimizer_rows(clock: Clock, elements: int | None = None, tensors: int = OPTIMIZER_TENSORS) -> list[dict]:
    """GB/s of torch's fused AdamW step and clip_grad_norm_ (OPTIMIZER_PASS_BYTES) over `elements` fp32 parameters
    in `tensors` tensors, as a model's are (OPTIMIZER_PARAMS where None; foreach AdamW on the CPU)."""
    size = (elements or OPTIMIZER_PARAMS) // tensors
    params = [torch.zeros(size, device=clock.device, dtype=torch.float32, requires_grad=True) for _ in range(tensors)]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, lr=1e-6, fused=clock.device == "cuda", foreach=clock.device != "cuda")
    opt.step()  # allocates the moments outside the timing
    tests = {
        "adamw_fused_fp32": opt.step,
        "clip_grad_norm_fp32": lambda: torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True),
    }
    rows = []
    for name, fn in tests.items():
        s = clock.time(fn)
        nbytes = OPTIMIZER_PASS_BYTES[name] * size * tensors
        rows.append({"op": name, "tensors": tensors, "bytes": nbytes, "ms": round(s * 1e3, 4),
                     "gbps": round(nbytes / s / 1e9, 1)})  # fmt: skip
    return rows
