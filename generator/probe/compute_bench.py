"""The GEMM, float8-cast, grouped-GEMM and HBM sections of `probe --compute`, timed by generator.probe.clock. torch is
imported by the caller's process only: this module is reached from generator.commands.probe once measuring starts.
"""

from __future__ import annotations

import time

import torch

from generator.probe.clock import Clock, gemm_time, tf
from generator.probe.compute_grid import Gemm

FP8_MAX = 448.0
"""Largest float8 e4m3 value (torchao's tensorwise scale maps the amax onto it)."""


def gemm_operands(g: Gemm, device: str, dtype):
    """bf16 operands laid out as autograd hands them to the GEMM: fwd x @ W^T (W stored [N, K]), dgrad dY @ W,
    wgrad dY^T @ X."""
    if g.op == "fwd":
        return torch.randn(g.m, g.k, device=device, dtype=dtype), torch.randn(g.n, g.k, device=device, dtype=dtype).t()
    if g.op == "dgrad":
        return torch.randn(g.m, g.k, device=device, dtype=dtype), torch.randn(g.k, g.n, device=device, dtype=dtype)
    return torch.randn(g.k, g.m, device=device, dtype=dtype).t(), torch.randn(g.k, g.n, device=device, dtype=dtype)


def gemm_rows(clock: Clock, gemms: list[Gemm], dtype_name: str, budget_s: float) -> list[dict]:
    """TFLOP/s of each GEMM in bf16 (or fp32): torch.mm in the layout autograd uses."""
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
    rows, t_end = [], time.monotonic() + budget_s
    for g in gemms:
        if clock.cut(f"gemm {dtype_name} {g.op} {g.m}x{g.k}x{g.n}", t_end):
            continue
        try:
            a, b = gemm_operands(g, clock.device, dtype)
            s = gemm_time(clock, lambda a=a, b=b: torch.mm(a, b))
        except RuntimeError as exc:  # out of memory on a small card: the shape is listed, not guessed
            clock.skip(f"gemm {dtype_name} {g.op} {g.m}x{g.k}x{g.n}", exc)
            continue
        rows.append({"m": g.m, "k": g.k, "n": g.n, "op": g.op, "ms": round(s * 1e3, 4), "tflops": tf(g.flops, s)})
        del a, b
    return rows


def fp8_supported(device: str) -> str | None:
    """None when torch._scaled_mm runs float8 here, else why not."""
    if device != "cuda":
        return "float8 GEMMs need a CUDA GPU"
    if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        return f"torch {torch.__version__} has no float8 / _scaled_mm"
    if torch.cuda.get_device_capability() < (8, 9):
        return "float8 tensor cores need compute capability 8.9+ (Ada, Hopper, Blackwell)"
    return None


def fp8_gemm_rows(clock: Clock, gemms: list[Gemm], budget_s: float) -> list[dict]:
    """TFLOP/s of torch._scaled_mm with tensorwise scales (torchao's default recipe), e4m3 x e4m3 -> bf16; the
    operands already cast and laid out (A row-major, B column-major, as torchao prepares them). The cast and
    transpose work is timed separately (cast_rows). Shapes with a dimension not divisible by 16 are skipped
    (torchao / accelerate leave those Linears in bf16)."""
    f8 = torch.float8_e4m3fn
    one = torch.ones((), device=clock.device, dtype=torch.float32)
    rows, t_end = [], time.monotonic() + budget_s
    for g in gemms:
        if g.m % 16 or g.k % 16 or g.n % 16:
            continue
        if clock.cut(f"gemm fp8 {g.op} {g.m}x{g.k}x{g.n}", t_end):
            continue
        try:
            a = torch.randn(g.m, g.k, device=clock.device, dtype=torch.bfloat16).to(f8)
            b = torch.randn(g.n, g.k, device=clock.device, dtype=torch.bfloat16).to(f8).t()
            fn = lambda a=a, b=b: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
            s = gemm_time(clock, fn)
        except RuntimeError as exc:
            clock.skip(f"gemm fp8 {g.op} {g.m}x{g.k}x{g.n}", exc)
            continue
        rows.append({"m": g.m, "k": g.k, "n": g.n, "op": g.op, "ms": round(s * 1e3, 4), "tflops": tf(g.flops, s)})
        del a, b
    return rows


def _cast_tensorwise(x):
    """torchao's tensorwise float8 cast: amax reduction, scale, scaled clamp and cast to e4m3."""
    amax = x.abs().max().float()
    scale = FP8_MAX / torch.clamp(amax, min=1e-12)
    return (x.float() * scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), scale


def _cast_transpose(x):
    """The backward's recast of a saved bf16 tensor into a column-major fp8 copy (weight-gradient operand)."""
    y, scale = _cast_tensorwise(x)
    return y.t().contiguous(), scale


def cast_rows(clock: Clock, shapes: list[tuple[int, int]], compiled: bool, budget_s: float) -> list[dict]:
    """Seconds per element of the float8 cast of a bf16 [rows, cols] tensor, eager and (unless `compiled` is False)
    under torch.compile as train.py's compiled layers run it. `ns_per_elem` covers amax + scale + cast (+ the
    transpose copy for `kind` cast_transpose)."""
    fns = {"cast": _cast_tensorwise, "cast_transpose": _cast_transpose}
    modes = [("eager", fns)]
    if compiled:
        modes.append(("compiled", {k: torch.compile(f) for k, f in fns.items()}))
    rows, t_end = [], time.monotonic() + budget_s
    for mode, table in modes:
        for r, c in shapes:
            x = torch.randn(r, c, device=clock.device, dtype=torch.bfloat16)
            for kind, fn in table.items():
                if clock.cut(f"fp8 {kind} {mode} {r}x{c}", t_end):
                    continue
                try:
                    s = clock.time(lambda fn=fn, x=x: fn(x))
                except Exception as exc:  # no compiler toolchain for inductor, say
                    clock.skip(f"fp8 {kind} {mode} {r}x{c}", exc)
                    continue
                n = r * c
                gbps = 3.0 * n / s / 1e9  # bytes a fused cast must move: read bf16 (2), write fp8 (1)
                row = {"kind": kind, "mode": mode, "rows": r, "cols": c, "ms": round(s * 1e3, 4)}
                ns = float(f"{s / n * 1e9:.4g}")
                rows.append({**row, "ns_per_elem": ns, "gbps_3_bytes_per_elem": round(gbps, 1)})
            del x
    return rows


def grouped_rows(clock: Clock, experts: list[tuple[int, int, int, int]], tokens: tuple[int, ...],
                 budget_s: float) -> list[dict]:  # fmt: skip
    """MoE expert GEMMs at balanced top-k routing (tokens x top_k rows split evenly over the experts), forward and
    input-gradient layouts: torch._grouped_mm in bf16 where this torch has it, and transformers' per-expert fallback
    loop in bf16 and in fp32 (a full fine-tune loads fp32 weights: grouped_mm_fallback casts the input to them)."""
    rows, t_end = [], time.monotonic() + budget_s
    have_grouped = hasattr(torch, "_grouped_mm")
    for e, top_k, k_in, n_out in experts:
        for m in tokens:
            total = m * top_k
            per = total // e
            offs = torch.arange(1, e + 1, device=clock.device, dtype=torch.int32) * per
            for op in ("fwd", "dgrad"):
                kk, nn = (k_in, n_out) if op == "fwd" else (n_out, k_in)
                impls = (["grouped_mm"] if have_grouped else []) + ["loop_bf16", "loop_fp32"]
                for impl in impls:
                    if clock.cut(f"grouped {impl} {op} E{e} top{top_k} {m}x{kk}x{nn}", t_end):
                        continue
                    dtype = torch.float32 if impl == "loop_fp32" else torch.bfloat16
                    a = torch.randn(per * e, kk, device=clock.device, dtype=dtype)
                    if op == "fwd":  # x @ W_e^T, W_e stored [out, in]
                        w = torch.randn(e, nn, kk, device=clock.device, dtype=dtype).transpose(1, 2)
                    else:  # dY @ W_e: the stored [out, in] weight, not transposed
                        w = torch.randn(e, kk, nn, device=clock.device, dtype=dtype)
                    if impl == "grouped_mm":
                        fn = lambda a=a, w=w, offs=offs: torch._grouped_mm(a, w, offs=offs)  # noqa: E731
                    else:
                        fn = lambda a=a, w=w, per=per, e=e: [a[i * per : (i + 1) * per] @ w[i] for i in range(e)]  # noqa: E731
                    try:
                        s = clock.time(fn)
                    except Exception as exc:  # grouped_mm needs sm90 and 16-aligned strides
                        clock.skip(f"grouped {impl} {op} E{e}", exc)
                        continue
                    flops = 2.0 * per * e * kk * nn
                    rows.append({"impl": impl, "op": op, "experts": e, "top_k": top_k, "tokens": m, "k": kk, "n": nn,
                                 "ms": round(s * 1e3, 4), "tflops": tf(flops, s)})  # fmt: skip
                    del a, w
    return rows


def hbm_rows(clock: Clock, elements: int) -> list[dict]:
    """Device-memory bandwidth (GB/s, bytes read + written) of a copy, an elementwise add and a bf16 -> fp32 cast."""
    x = torch.randn(elements, device=clock.device, dtype=torch.bfloat16)
    y, z = torch.empty_like(x), torch.randn_like(x)
    wide = torch.empty(elements, device=clock.device, dtype=torch.float32)
    tests = [("copy_bf16", lambda: y.copy_(x), 4), ("add_bf16", lambda: torch.add(x, z, out=y), 6),
             ("cast_bf16_fp32", lambda: wide.copy_(x), 6)]  # fmt: skip
    rows = []
    for name, fn, bytes_per_elem in tests:
        s = clock.time(fn)
        rows.append({"op": name, "bytes": bytes_per_elem * elements, "ms": round(s * 1e3, 4),
                     "gbps": round(bytes_per_elem * elements / s / 1e9, 1)})  # fmt: skip
    return rows
