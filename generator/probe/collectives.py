"""Bus-bandwidth arithmetic, as nccl-tests defines it (doc/PERFORMANCE.md), so numbers compare with nccl-tests.

S is the total buffer size in bytes: the all-reduce buffer, the all-gather output, the reduce-scatter input.
algbw = S / t; busbw = algbw x factor, factor 2(n-1)/n for all-reduce and (n-1)/n for all-gather / reduce-scatter.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass

from generator.errors import UserError

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def bus_factor(collective: str, n: int) -> float:
    if n < 1:
        raise ValueError("a collective needs at least one rank")
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    raise ValueError(f"unknown collective {collective!r}")


def algbw_gbps(size_bytes: int, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes, as nccl-tests prints)."""
    return size_bytes / seconds / 1e9 if seconds > 0 else 0.0


def busbw_gbps(collective: str, size_bytes: int, seconds: float, n: int) -> float:
    return algbw_gbps(size_bytes, seconds) * bus_factor(collective, n)


def parse_size(text: str) -> int:
    """'1M' -> 1048576; K/M/G are binary multiples as in nccl-tests' -b/-e flags."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]?)(?:i?B)?\s*", text.upper())
    if not m:
        raise UserError(f"size {text!r} is not like 1M, 256M or 1G")
    value = int(float(m.group(1)) * _UNITS[m.group(2)])
    if value <= 0 or value > 16 * 1024**3:
        raise UserError(f"size {text!r} must be between 1 byte and 16G")
    return value


def parse_sizes(text: str) -> list[int]:
    sizes = sorted({parse_size(part) for part in text.split(",") if part.strip()})
    if not sizes:
        raise UserError("--sizes needs at least one size, e.g. 1M,16M,256M,1G")
    return sizes


def format_size(size_bytes: int) -> str:
    for unit, scale in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if size_bytes >= scale and size_bytes % scale == 0:
            return f"{size_bytes // scale}{unit}"
    return f"{size_bytes}B"


@dataclass(frozen=True)
class Measurement:
    collective: str
    """One of COLLECTIVES."""
    size_bytes: int
    """Total buffer size S (see module docstring)."""
    ranks: int
    """Processes (GPUs) in the collective."""
    times_s: tuple[float, ...]
    """Per-repeat time of one collective, the slowest rank's, in seconds."""

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def algbw_gbps(self) -> float:
        return algbw_gbps(self.size_bytes, self.median_s)

    @property
    def busbw_gbps(self) -> float:
        return busbw_gbps(self.collective, self.size_bytes, self.median_s, self.ranks)
