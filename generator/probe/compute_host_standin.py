"""The host rows' stand-in for a machine without transformers (and the CPU in tests): Mistral's decoder layer written
op for op as it runs eagerly, at the probe's tiny widths (generator/probe/compute_host.py has the why): RMSNorm (fp32
upcast, pow, mean, rsqrt, mul, downcast, weight), q/k/v/o, RoPE (rotate_half), SDPA, residual adds, gate/up/down with
SiLU, under autocast with fp32 weights (train.py's full fine-tune) or a bf16 base with fp32 rank-r adapters (peft's
LoRA: dropout, A, B, scaling, add)."""

from __future__ import annotations

import statistics
import time

import torch
from torch import nn

from generator.probe.clock import Clock
from generator.probe.compute_host import HEAD_DIM, HEADS, HIDDEN, INTER, KV_HEADS, LAYERS, TOKENS


class _Norm(nn.Module):
    def __init__(self, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(HIDDEN, dtype=dtype))

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * x.to(dtype)


class _Proj(nn.Module):
    """nn.Linear, or peft's LoRA layer around it (fp32 adapters on a bf16 base)."""

    def __init__(self, k, n, dtype, lora: bool):
        super().__init__()
        self.base = nn.Linear(k, n, bias=False, dtype=dtype)
        self.lora = lora
        if lora:
            self.base.weight.requires_grad_(False)
            self.a = nn.Linear(k, 16, bias=False, dtype=torch.float32)
            self.b = nn.Linear(16, n, bias=False, dtype=torch.float32)
            self.drop = nn.Dropout(0.0)

    def forward(self, x):
        out = self.base(x)
        if self.lora:
            out = out + self.b(self.a(self.drop(x.to(self.a.weight.dtype)))) * 2.0
        return out


def _rotate(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class _Layer(nn.Module):
    def __init__(self, dtype, lora: bool):
        super().__init__()
        q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
        self.n1, self.n2 = _Norm(dtype), _Norm(dtype)
        self.q, self.k, self.v = (
            _Proj(HIDDEN, q, dtype, lora),
            _Proj(HIDDEN, kv, dtype, lora),
            _Proj(HIDDEN, kv, dtype, lora),
        )
        self.o = _Proj(q, HIDDEN, dtype, lora)
        self.gate, self.up = _Proj(HIDDEN, INTER, dtype, lora), _Proj(HIDDEN, INTER, dtype, lora)
        self.down = _Proj(INTER, HIDDEN, dtype, lora)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, s, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.k(h).view(b, s, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.v(h).view(b, s, KV_HEADS, HEAD_DIM).transpose(1, 2)
        q, k = q * cos + _rotate(q) * sin, k * cos + _rotate(k) * sin
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).contiguous().view(b, s, -1))
        h = self.n2(x)
        return x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


def _wall(clock: Clock, fn, repeats: int = 7) -> float:
    """Median wall seconds of fn() including the final synchronise (host-bound: GPU time hides under it)."""
    for _ in range(2):
        fn()
    clock.sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        clock.sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def variant_row(clock: Clock, variant: str, compiled: bool) -> dict:
    lora = variant == "lora"
    dtype = clock.half if lora else torch.float32  # train.py: LoRA on a bf16 base, full on fp32 masters
    layers = nn.ModuleList(_Layer(dtype, lora) for _ in range(LAYERS)).to(clock.device)
    if compiled:
        for i, layer in enumerate(layers):
            layers[i] = torch.compile(layer)
    x0 = torch.randn(1, TOKENS, HIDDEN, device=clock.device, dtype=clock.half, requires_grad=True)
    cos = torch.randn(TOKENS, HEAD_DIM, device=clock.device, dtype=clock.half)
    sin = torch.randn_like(cos)
    autocast = clock.autocast()

    def forward():
        with autocast:
            x = x0
            for layer in layers:
                x = layer(x, cos, sin)
        return x

    def both():
        forward().float().sum().backward()

    fwd, total = _wall(clock, forward), _wall(clock, both)
    return {"variant": variant, "compiled": compiled, "layers": LAYERS, "tokens": TOKENS, "layer": "stand-in",
            "fwd_ms_per_layer": round(fwd / LAYERS * 1e3, 4),
            "fwdbwd_ms_per_layer": round(total / LAYERS * 1e3, 4)}  # fmt: skip
