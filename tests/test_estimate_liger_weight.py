"""What Liger's fused linear cross-entropy costs around an fp32 lm_head weight (estimate.passes.liger_weight_bytes):
the premise checked on the installed torch (autocast casts a transposed weight on every call, a leaf parameter once),
and the estimate charging it only where the weight is fp32 under autocast."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from generator.estimate import Placement, Workload, estimate
from generator.estimate.passes import liger_loss_chunks, liger_weight_bytes
from generator.model import load_model


class _WeightCasts(TorchDispatchMode):
    """Counts bf16 copies of a tensor with `numel` elements."""

    def __init__(self, numel: int):
        super().__init__()
        self.numel, self.n = numel, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func is torch.ops.aten._to_copy.default and kwargs.get("dtype") == torch.bfloat16:
            self.n += int(args[0].numel() == self.numel)
        return out


def _casts(call, weight: torch.nn.Parameter) -> int:
    x = torch.randn(8, weight.shape[1])
    with torch.autocast("cpu", dtype=torch.bfloat16), _WeightCasts(weight.numel()) as seen:
        for _ in range(4):
            call(x, weight)
    return seen.n


def test_autocast_casts_the_weight_liger_reads_on_every_chunk_but_a_modules_weight_once():
    weight = torch.nn.Parameter(torch.randn(48, 16))
    assert _casts(lambda x, w: torch.nn.functional.linear(x, w), weight) == 1  # the cast cache: leaf, not a view

    def liger_chunk(x, w):  # its forward's logits and input-gradient matmuls, autograd off as in a Function
        with torch.no_grad():
            logits = x @ w.t()
            logits @ w

    # four chunks: the transposed view is cast every time, the plain weight once (then served from the cache)
    assert _casts(liger_chunk, weight) == 4 + 1


def test_the_bytes_follow_the_chunks_and_only_an_fp32_weight_under_liger_pays_them():
    model = load_model("llama-3-8b")  # 128,256 x 4,096: 32 chunks of 512 tokens at 16,384 a micro-step
    full = Workload(method="full", seq_len=8192, micro_batch=2, liger=True, load_dtype="fp32")
    assert liger_loss_chunks(model, full) == 32
    assert liger_loss_chunks(model, replace(full, seq_len=128, micro_batch=1)) == 32  # of 4 tokens
    assert liger_loss_chunks(model, replace(full, seq_len=16, micro_batch=1)) == 16  # a chunk is at least a token
    elements = model.vocab_size * model.hidden_size
    assert liger_weight_bytes(model, full, True) == 32 * elements * 14
    assert liger_weight_bytes(model, replace(full, method="lora"), True) == 32 * elements * 6  # no gradient to add
    assert liger_weight_bytes(model, replace(full, grad_accum=3), True) == 3 * 32 * elements * 14
    assert liger_weight_bytes(model, full, False) == 0.0  # a bf16 weight (FSDP's compute copy, a bf16 load)
    assert liger_weight_bytes(model, replace(full, liger=False), True) == 0.0  # the unfused loss: cast once


def test_the_step_pays_those_bytes_at_the_tables_bandwidth_under_ddp_and_not_under_fsdp(monkeypatch):
    import generator.estimate.timing as timing
    from generator.estimate.compute_source import table_for

    model = load_model("llama-3-8b")
    placement = Placement(num_gpus_per_machine=1, gpu_name="NVIDIA H200", gpu_memory_gb=150.75, busbw_gbps=0.0)
    full = Workload(method="full", seq_len=8192, micro_batch=2, liger=True, grad_checkpointing=True)
    with_term = {s: estimate(model, full, placement, s).step_s for s in ("ddp", "fsdp")}
    monkeypatch.setattr(timing, "liger_weight_bytes", lambda *a: 0.0)
    without = {s: estimate(model, full, placement, s).step_s for s in ("ddp", "fsdp")}
    hbm = table_for(placement.gpu_name, placement.compute).hbm_gbps * 1e9
    assert with_term["ddp"] - without["ddp"] == pytest.approx(liger_weight_bytes(model, full, True) / hbm, rel=1e-6)
    assert with_term["fsdp"] == without["fsdp"]  # FSDP computes in bf16 copies of the weights
