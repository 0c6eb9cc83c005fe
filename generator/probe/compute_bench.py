"""Timing primitives of `probe --compute` and the GEMM, float8-cast, grouped-GEMM and HBM sections. torch is imported
by the caller's process only: this module is reached from generator.commands.probe once measuring starts.

Timing: CUDA events around each call (GPU time, launch gaps excluded), warm-ups first, the median of the repeats; on
CPU, perf_counter. Each section runs under a time box: shapes not reached are listed as skipped, never guessed.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch

from generator.estimate.compute_table import GEMM_BURST, GEMM_INTERLEAVED
from generator.probe.compute_grid import Gemm

FP8_MAX = 448.0
"""Largest float8 e4m3 value (torchao's tensorwise scale maps the amax onto it)."""


@dataclass
class Clock:
    """Warm-ups, repeats and the section time boxes."""

    device: str
    warmup: int = 2
    min_repeats: int = 3
    max_repeats: int = 10
    target_s: float = 0.08
    """Stop repeating once the timed calls add up to this many seconds (after min_repeats)."""
    skipped: list[str] = field(default_factory=list)
    gemm_timing: str = GEMM_BURST
    """How gemm_time times a GEMM on the GPU (estimate.compute_table.GEMM_TIMINGS)."""
    lost: str | None = None
    """The first skipped row's CUDA error that poisons the process (an illegal memory access, a device-side assert:
    every later kernel fails with it), as skip() listed it; None while the context is good."""

    @classmethod
    def for_device(cls, device: str) -> Clock:
        """The probe's clock: its defaults on a GPU; on the CPU (tests of the plumbing) fewer, shorter repeats."""
        return cls(device) if device == "cuda" else cls(device, warmup=1, min_repeats=2, max_repeats=3, target_s=0.01)

    @property
    def half(self):
        """The dtype of the rows' bf16 work on this device: bf16 on a GPU; fp32 on the CPU (tests of the plumbing),
        whose bf16 matmuls are emulated on cores without AVX512-BF16 (a 64 x 128 x 256 product: 2.9 ms against
        0.09 in fp32 on the CI machine's kind, 2026-12-05), which put the CPU probe past its test's two minutes."""
        import torch

        return torch.bfloat16 if self.device == "cuda" else torch.float32

    def autocast(self):
        """train.py's bf16 autocast on a GPU; off on the CPU (`half`)."""
        import torch

        return torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.device == "cuda")

    def skip(self, what: str, exc: BaseException) -> None:
        """List `what` as not measured, with the error's first line (CUDA's run on with a paragraph of advice), and
        remember a CUDA error that poisons the process (Qwen3-30B-A3B's own host rows hit one on an H100 on
        2026-12-05), so the rows after it are named as not run rather than each failing the same way."""
        first = (str(exc).strip().splitlines() or [""])[0]
        self.skipped.append(f"{what}: {type(exc).__name__}: {first[:120]}")
        if self.lost is None and cuda_context_lost(exc):
            self.lost = f"{type(exc).__name__}: {first[:80]}"

    def cut(self, what: str, t_end: float) -> bool:
        """Whether the row `what` is left out, listed in `skipped` with why: past its section's time box (monotonic
        `t_end`), or after a CUDA error of an earlier row that poisons the process (`lost`: each later row would fail
        the same way)."""
        if self.lost:
            why = f"not run after the CUDA error of an earlier row ({self.lost})"
        elif time.monotonic() > t_end:
            why = "time box"
        else:
            return False
        self.skipped.append(f"{what}: {why}")
        return True

    def sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def time(self, fn, burst: int = 1) -> float:
        """Median seconds of one call of fn(), timed over `burst` back-to-back calls between one pair of events."""
        for _ in range(self.warmup):
            fn()
        self.sync()
        times: list[float] = []
        while len(times) < self.max_repeats:
            if self.device == "cuda":
                times.append(_event_seconds(fn, burst))
            else:
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            if len(times) >= self.min_repeats and sum(times) >= self.target_s:
                break
        return statistics.median(times)


def cuda_context_lost(exc: BaseException) -> bool:
    """Whether `exc` is a CUDA error that poisons the process, rather than a Python error in one row's build."""
    accelerator_error = getattr(torch, "AcceleratorError", ())
    return isinstance(exc, accelerator_error) or (isinstance(exc, RuntimeError) and "CUDA error" in str(exc))


def _event_seconds(fn, burst: int) -> float:
    """GPU seconds of one call of fn over `burst` back-to-back calls between one pair of CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(burst):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / burst


BURST_S = 5e-4
"""A GEMM is timed as a burst of back-to-back calls lasting about this long: autograd queues a step's GEMMs ahead of
the GPU, so none waits for its launch. Timed one call at a time between two events, a small GEMM carried the launch
gap (19 us median over 46 LoRA-sized shapes on one H200, bench/results/gemm-timing-h200-2026-12-02.json), and LoRA's
rank-16 GEMMs read 2.4x slower than in a profiled step (bench/results/profile-h200-2026-12-02/)."""


COPY_BYTES_PER_S = 4.3e12
"""An H200's device copy rate (bytes read + written), to size the copy before each interleaved call; a slower card's
copy lasts longer, which only lowers the duty cycle."""


def gemm_time(clock: Clock, fn) -> float:
    """Seconds of one in-queue call of fn: one timed call sizes the burst (1-50 calls) or the copy before each call
    (clock.gemm_timing), then those are timed."""
    if clock.device != "cuda":
        return clock.time(fn)
    fn()
    single = _event_seconds(fn, 1)
    if clock.gemm_timing == GEMM_INTERLEAVED:
        return _interleaved_seconds(clock, fn, single)
    return clock.time(fn, burst=max(1, min(50, round(BURST_S / max(single, 1e-6)))))


def _interleaved_seconds(clock: Clock, fn, single: float) -> float:
    """Median GPU seconds of fn, each call timed between two events right after a bf16 device copy of about
    `single` seconds (the copy keeps the GPU busy while the host queues the call: no launch gap in the time)."""
    src = torch.empty(max(1 << 20, int(single * COPY_BYTES_PER_S / 4)), device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    rounds = max(clock.min_repeats + 1, min(200, round(clock.target_s / max(single, 1e-6))))
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(rounds)]
    for start, end in events:
        dst.copy_(src)
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) / 1e3 for start, end in events[1:])


def per_layer(shallow: tuple[float, ...], deep: tuple[float, ...], span: int) -> tuple[float, ...]:
    """Seconds per layer of each timing (forward, forward + backward, ...) from two depths' timings, `span` layers
    apart: what the two share (embedding, mask, lm_head, loss) drops out; noise below zero reads as zero."""
    return tuple(max(d - s, 0.0) / span for s, d in zip(shallow, deep, strict=True))


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


def tf(flops: float, seconds: float) -> float:
    """TFLOP/s to 4 significant digits (CPU rows are tiny)."""
    return float(f"{flops / seconds / 1e12:.4g}") if seconds > 0 else 0.0
