"""Masked SDPA as the probe times it against SDPA as transformers calls it in a step (GPU; ~1 min).

TRL's packed short documents at 4,096 x 2 (one flattened row of 8,192 tokens under a block-diagonal mask) ran cuDNN's
masked attention 15.5 ms a layer forward and backward in the profiled step (bench/results/profile-h200-2026-12-02/
trl-short) where the probe's sdpa_dense rows give 12.5. The probe calls SDPA on contiguous [mb, heads, s, d] tensors
under a causal mask expanded over the batch; a Llama-coded layer hands it the query as a transposed view of its
[mb, s, heads, d] projection (RoPE keeps that layout), the keys and values through repeat_kv (a contiguous copy), and
a mask built per row: block-diagonal where the documents are packed. Each variant below changes one of those, so the
rows say which one the kernel's speed follows. Every row also names the kernels one call ran.

    python bench/scripts/attention_layout.py --out $OUT/attention-layout.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

HEADS, KV, DIM = 32, 8, 128  # Mistral-7B's layout, the profiled row's


def _tensors(mb: int, seq: int, layout: str):
    """Leaves q, k, v and the views SDPA receives: `bhsd` contiguous (the probe), `bshd` a transposed view of a
    [mb, s, heads, d] tensor (a Llama-coded layer after RoPE)."""
    import torch

    def one(heads):
        if layout == "bhsd":
            leaf = torch.randn(mb, heads, seq, DIM, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            return leaf, leaf
        leaf = torch.randn(mb, seq, heads, DIM, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        return leaf, leaf.transpose(1, 2)

    return [one(h) for h in (HEADS, KV, KV)]


def _mask(mb: int, seq: int, doc: int):
    """A bool [mb, 1, s, s] mask materialised per row: causal, block-diagonal over `doc`-token documents when doc."""
    import torch

    i = torch.arange(seq, device="cuda")
    keep = i[:, None] >= i[None, :]
    if doc:
        keep &= (i[:, None] // doc) == (i[None, :] // doc)
    return keep[None, None].repeat(mb, 1, 1, 1)


def _call(variant: str, views, mb: int, seq: int, doc: int):
    import torch
    import torch.nn.functional as F
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from generator.probe.compute_attention import _causal_mask, _repeat

    q, k, v = views
    n = HEADS // KV
    if variant == "probe":  # generator/probe/compute_attention.py's sdpa_dense, as it stands
        mask = _causal_mask(q, seq, "cuda")
        return lambda: F.scaled_dot_product_attention(q, _repeat(k, n), _repeat(v, n), attn_mask=mask)
    if variant == "causal_flag":  # no mask: transformers passes is_causal and the keys unrepeated
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = n, True
    mask = _mask(mb, seq, doc if variant == "hf_docs" else 0)
    return lambda: sdpa_attention_forward(module, q, k, v, mask, scaling=DIM**-0.5)[0]


def _time(fn, reps: int) -> float:
    import torch

    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def _kernels(fn) -> list[str]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = {e.name for e in prof.events() if e.device_type.name == "CUDA" and e.name}
    return sorted(n[:120] for n in names if "sdpa" in n or "fmha" in n or "flash" in n or "attention" in n.lower())


def row(variant: str, layout: str, mb: int, seq: int, doc: int, reps: int) -> dict:
    import torch

    pairs = _tensors(mb, seq, layout)
    leaves, views = [p[0] for p in pairs], [p[1] for p in pairs]
    fn = _call(variant, views, mb, seq, doc)
    out = fn()
    grad = torch.randn_like(out)

    def both():
        torch.autograd.grad(fn(), leaves, grad)

    fwd, fwdbwd = _time(fn, reps), _time(both, reps)
    return {"variant": variant, "layout": layout, "mb": mb, "seq": seq, "doc": doc if variant == "hf_docs" else seq,
            "heads": HEADS, "kv_heads": KV, "head_dim": DIM, "fwd_ms": round(fwd, 4), "fwdbwd_ms": round(fwdbwd, 4),
            "kernels_fwd": _kernels(fn), "kernels_fwdbwd": _kernels(both)}  # fmt: skip


# (variant, layout): the probe as it is; the probe's call on transformers' query layout; transformers' own call with a
# causal mask and with packed documents' block-diagonal one; the unmasked flash call for scale.
VARIANTS = (("probe", "bhsd"), ("probe", "bshd"), ("hf_causal", "bshd"), ("hf_docs", "bshd"), ("causal_flag", "bshd"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shapes", default="8192x1,4096x2,4096x1", help="SEQxMB, comma-separated")
    ap.add_argument("--doc", type=int, default=54, help="document length of the packed rows (the bench's short data)")
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    import torch
    import transformers

    rows, t0 = [], time.monotonic()
    for shape in a.shapes.split(","):
        seq, mb = (int(x) for x in shape.split("x"))
        for variant, layout in VARIANTS:
            try:
                rows.append(row(variant, layout, mb, seq, a.doc, a.reps))
            except Exception as exc:  # a kernel this torch lacks, or out of memory: name it and go on
                rows.append({"variant": variant, "layout": layout, "mb": mb, "seq": seq, "error": repr(exc)[:300]})
            print(json.dumps({k: rows[-1].get(k) for k in ("variant", "layout", "mb", "seq", "fwd_ms", "fwdbwd_ms")}))
            torch.cuda.empty_cache()
    meta = {"what": "masked SDPA: the probe's call against transformers' (bench/scripts/attention_layout.py)",
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "transformers": transformers.__version__,
            "host": platform.node(), "seconds": round(time.monotonic() - t0, 1)}  # fmt: skip
    a.out.write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
