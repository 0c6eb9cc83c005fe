"""The GPU's SM clock and power while something runs, sampled by `nvidia-smi --loop-ms` in a child process.

A GEMM's speed follows the SM clock, and the clock follows power: back-to-back GEMMs on random operands draw the
card to its power limit and the clock drops, while a training step's memory-bound kernels between its GEMMs let it
recover. A rate measured under one duty cycle and used under another is off by the clock ratio, so the benches record
the clock beside every timing (bench/sweep.py for each cell, bench/scripts/gemm_in_step.py per phase).

Nothing here changes the card's settings: nvidia-smi is only asked to report (device METHOD.md: measure the card as
you find it). Where nvidia-smi is missing the sampler records nothing and says so.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass, field
from functools import cache

FIELDS = ("clocks.sm", "clocks.max.sm", "power.draw", "power.limit", "utilization.gpu", "temperature.gpu")
REASONS = ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown")
"""Clock-event reasons asked for beside the fields; drivers name them clocks_event_reasons (newer) or
clocks_throttle_reasons (older), tried in that order."""
BUSY_PCT = 90
"""Samples below this utilization (the share of the interval some kernel ran) are idle gaps, start-up or loading, and
are left out of a run's summary."""


@dataclass(frozen=True)
class Sample:
    t: float
    """time.time() when the line was read."""
    gpu: int
    sm_mhz: float
    max_sm_mhz: float
    power_w: float
    power_limit_w: float
    util_pct: float
    temp_c: float
    power_capped: bool | None = None
    """The driver's software-power-cap reason flag as reported (None: not reported). Read it with power_w: on one
    H200 (2026-12-04) it stayed Active through whole runs drawing 330-690 W, so the clock is the better witness."""


def parse_line(line: str, with_reasons: bool) -> Sample | None:
    """One CSV line of `nvidia-smi --query-gpu=index,<FIELDS>[,<REASONS>] --format=csv,noheader,nounits`; None for a
    line that is not one (a header, a driver message, '[N/A]' in a numeric field)."""
    parts = [p.strip() for p in line.split(",")]
    want = 1 + len(FIELDS) + (len(REASONS) if with_reasons else 0)
    if len(parts) != want:
        return None
    try:
        gpu = int(parts[0])
        nums = [float(p) for p in parts[1 : 1 + len(FIELDS)]]
    except ValueError:
        return None
    capped = None
    if with_reasons:
        flags = [p.lower() for p in parts[1 + len(FIELDS) :]]
        capped = flags[0] == "active" if flags[0] in ("active", "not active") else None
    return Sample(time.time(), gpu, *nums, power_capped=capped)


def summarise(samples: list[Sample], start: float | None = None, end: float | None = None,
              busy_pct: float = BUSY_PCT) -> dict:  # fmt: skip
    """Median clock and power over the busy samples between start and end (time.time()), with how many there were
    and the share the power cap held: what a timing taken in that window ran at."""
    window = [s for s in samples if (start is None or s.t >= start) and (end is None or s.t <= end)]
    busy = [s for s in window if s.util_pct >= busy_pct]
    if not busy:
        return {"samples": len(window), "busy_samples": 0}
    med = statistics.median
    capped = [s.power_capped for s in busy if s.power_capped is not None]
    return {
        "samples": len(window),
        "busy_samples": len(busy),
        "sm_mhz": round(med(s.sm_mhz for s in busy), 1),
        "sm_mhz_min": round(min(s.sm_mhz for s in busy), 1),
        "max_sm_mhz": round(max(s.max_sm_mhz for s in busy), 1),
        "power_w": round(med(s.power_w for s in busy), 1),
        "power_limit_w": round(max(s.power_limit_w for s in busy), 1),
        "temp_c": round(med(s.temp_c for s in busy), 1),
        "power_capped_share": round(sum(capped) / len(capped), 3) if capped else None,
    }


@cache
def answered_query(exe: str) -> tuple[str | None, bool]:
    """(the query this driver answers, whether it carries the clock-event reasons): with the reasons under either
    name, else without them; (None, False) where it answers none. Asked once per process: a sweep samples every cell."""
    base = ",".join(("index", *FIELDS))
    for prefix in ("clocks_event_reasons", "clocks_throttle_reasons", None):
        query = base if prefix is None else base + "," + ",".join(f"{prefix}.{r}" for r in REASONS)
        try:
            ok = subprocess.run([exe, f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                                capture_output=True, text=True, timeout=20).returncode == 0  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            return None, False
        if ok:
            return query, prefix is not None
    return None, False


@dataclass
class ClockSampler:
    """`with ClockSampler() as clocks: ...` samples every `interval_ms` on a reader thread; `clocks.summary()` (or a
    window of it) afterwards. `error` says why nothing was sampled."""

    interval_ms: int = 50
    gpu: int | None = None
    samples: list[Sample] = field(default_factory=list)
    error: str | None = None
    _proc: subprocess.Popen | None = None
    _thread: threading.Thread | None = None
    _reasons: bool = False

    def __enter__(self) -> ClockSampler:
        exe = shutil.which("nvidia-smi")
        if exe is None:
            self.error = "nvidia-smi not found"
            return self
        query, self._reasons = answered_query(exe)
        if query is None:
            self.error = "nvidia-smi answered none of the clock queries"
            return self
        cmd = [exe, f"--query-gpu={query}", "--format=csv,noheader,nounits", f"--loop-ms={self.interval_ms}"]
        if self.gpu is not None:
            cmd.insert(1, f"--id={self.gpu}")
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            s = parse_line(line, self._reasons)
            if s is not None:
                self.samples.append(s)

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            time.sleep(self.interval_ms / 1e3 * 2)  # the last interval's line
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def summary(self, start: float | None = None, end: float | None = None, busy_pct: float = BUSY_PCT) -> dict:
        if self.error:
            return {"error": self.error}
        return summarise(self.samples, start, end, busy_pct)
