"""How `probe --compute` times GPU work: CUDA events around each call (GPU time, launch gaps excluded), warm-ups first,
the median of the repeats; a GEMM in a burst or after a device copy (the launch gap out of its time); on CPU,
perf_counter. Each section runs under the Clock's time box: shapes not reached are listed as skipped, never guessed.
torch is imported by the caller's process only: this module is reached once measuring starts."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch

from generator.estimate.compute_table import GEMM_BURST, GEMM_INTERLEAVED


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
        return torch.bfloat16 if self.device == "cuda" else torch.float32

    def autocast(self):
        """train.py's bf16 autocast on a GPU; off on the CPU (`half`)."""
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


def tf(flops: float, seconds: float) -> float:
    """TFLOP/s to 4 significant digits (CPU rows are tiny)."""
    return float(f"{flops / seconds / 1e12:.4g}") if seconds > 0 else 0.0
