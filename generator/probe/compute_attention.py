"""Attention section of `probe --compute`: forward and forward+backward time of each kernel path transformers takes
(generator.estimate.attention.kernel_path), over sequence lengths and head layouts, bf16, head_dim 128 (and, for
`--model`, its own layout at its own head width).

- sdpa_causal: SDPA with is_causal=True and GQA's k/v passed as they are (enable_gqa): the flash kernel.
- sdpa_dense: SDPA with a materialised bool [mb, 1, s, s] causal mask, k/v repeated to every query head
  (transformers' repeat_kv; the repeat is timed with the call): the memory-efficient kernel, every score computed.
- flex: flex_attention (compiled, as transformers calls it) over a block mask of packed FLEX_DOC_TOKENS documents.
- sdpa_math: SDPA's math kernel, for a model whose count takes it (LayerSaved.path sdpa_math: a class handing SDPA
  fewer key heads than query heads without enable_gqa, Falcon-7B's in transformers 5.17-5.24), at its own layout:
  k/v broadcast as the class passes them, a bool causal mask, every score computed in fp32 (torch's default,
  allow_fp16_bf16_reduction_math_sdp off).
Rows keep the raw milliseconds and the geometry; `keys_per_query` names the keys each query multiplies on that path
(dense s, causal (s+1)/2, flex the kept 128-tiles' mean) and `tflops` is 4*mb*H*d*s*keys forward, x3.5 fwd+bwd
(backward: 2.5x the forward's matmuls, dQ dK dV and the recomputed scores).
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from generator.estimate.attention import flex_tile_keys
from generator.probe.clock import Clock, tf


def _qkv(mb: int, heads: int, kv: int, seq: int, dim: int, device: str):
    q = torch.randn(mb, heads, seq, dim, device=device, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(mb, kv, seq, dim, device=device, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(mb, kv, seq, dim, device=device, dtype=torch.bfloat16, requires_grad=True)
    return q, k, v


def _repeat(x, n: int):
    """transformers' repeat_kv: [mb, kv, s, d] -> [mb, kv*n, s, d]."""
    if n == 1:
        return x
    mb, kv, s, d = x.shape
    return x[:, :, None].expand(mb, kv, n, s, d).reshape(mb, kv * n, s, d)


def _causal_mask(q, seq: int, device: str):
    """A materialised bool causal mask [mb, 1, s, s], as transformers builds one for SDPA."""
    return torch.ones(seq, seq, device=device, dtype=torch.bool).tril()[None, None].expand(q.shape[0], 1, -1, -1)


def _callable(path: str, q, k, v, seq: int, doc: int, device: str):
    """(the call, keys per query); `doc` 0 = one document per sequence."""
    heads, kv = q.shape[1], k.shape[1]
    doc = doc or seq
    if path == "sdpa_causal":
        gqa = heads != kv
        try:  # transformers passes GQA's k/v unrepeated where SDPA takes enable_gqa (torch >= 2.5)
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
            return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa), (seq + 1) / 2
        except (RuntimeError, TypeError):
            n = heads // kv
            fn = lambda: F.scaled_dot_product_attention(q, _repeat(k, n), _repeat(v, n), is_causal=True)  # noqa: E731
            return fn, (seq + 1) / 2
    if path == "sdpa_dense":
        mask = _causal_mask(q, seq, device)
        n = heads // kv
        fn = lambda: F.scaled_dot_product_attention(q, _repeat(k, n), _repeat(v, n), attn_mask=mask)  # noqa: E731
        return fn, float(seq)
    if path == "sdpa_math":  # k/v broadcast unrepeated, no enable_gqa: as a class that takes the math kernel calls it
        from torch.nn.attention import SDPBackend, sdpa_kernel

        mask = _causal_mask(q, seq, device)

        def math():
            with sdpa_kernel(SDPBackend.MATH):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

        return math, float(seq)
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    doc_id = torch.arange(seq, device=device) // doc

    def mask_mod(b, h, qi, ki):
        return (doc_id[qi] == doc_id[ki]) & (qi >= ki)

    block = create_block_mask(mask_mod, None, None, seq, seq, device=device)
    compiled = torch.compile(flex_attention)
    return lambda: compiled(q, k, v, block_mask=block, enable_gqa=heads != kv), flex_tile_keys(seq, doc)


def attention_rows(clock: Clock, paths: list[str], layouts, seqs, tokens: int, dim: int, budget_s: float,
                   doc: int) -> list[dict]:  # fmt: skip
    """One row per (path, layout, seq): fwd_ms, fwdbwd_ms and the derived TFLOP/s (see the module docstring). A
    layout is (query heads, kv heads) at head width `dim`, or (query heads, kv heads, its own head width)."""
    rows, t_end = [], time.monotonic() + budget_s
    for path in paths:
        for heads, kv, *width in layouts:
            d = width[0] if width else dim
            for seq in seqs:
                label = f"attention {path} {heads}/{kv}x{d} s{seq}"
                if clock.cut(label, t_end):
                    continue
                mb = max(1, tokens // seq)
                try:
                    q, k, v = _qkv(mb, heads, kv, seq, d, clock.device)
                    fn, keys = _callable(path, q, k, v, seq, doc, clock.device)
                    out = fn()
                    grad = torch.randn_like(out)

                    def step(fn=fn, grad=grad, q=q, k=k, v=v):
                        torch.autograd.grad(fn(), (q, k, v), grad)

                    fwd = clock.time(fn)
                    both = clock.time(step)
                except Exception as exc:  # kernel unavailable on this device / torch, or out of memory
                    clock.skip(label, exc)
                    continue
                flops_fwd = 4.0 * mb * heads * d * seq * keys
                rows.append({"path": path, "heads": heads, "kv_heads": kv, "head_dim": d, "seq": seq, "mb": mb,
                             "doc": (doc or seq) if path == "flex" else seq, "keys_per_query": round(keys, 2),
                             "fwd_ms": round(fwd * 1e3, 4), "fwdbwd_ms": round(both * 1e3, 4),
                             "fwd_tflops": tf(flops_fwd, fwd), "fwdbwd_tflops": tf(3.5 * flops_fwd, both)})  # fmt: skip
                del q, k, v
    return rows
