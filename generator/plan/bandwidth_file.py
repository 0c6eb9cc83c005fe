"""Measured all-reduce bandwidth per GPU subset, as the planner uses it.

The file format belongs to `python -m generator probe` (generator/probe/bandwidth_file.py, which reads and writes it);
a hand-written {"subsets": {"0,1": 365.2}} is accepted too. The planner prefers a measured value over the topology
table for the exact same subset, and a measured subset over the table's pick when it is faster.
"""

from __future__ import annotations

from collections.abc import Mapping

MeasuredBandwidth = Mapping[frozenset[int], float]
"""GPU subset -> measured busbw, GB/s."""


def load_bandwidth_file(path: str) -> dict[frozenset[int], float]:
    from generator.probe.bandwidth_file import load_bandwidth_file as read_probe_file

    return {frozenset(ids): gbps for ids, gbps in read_probe_file(path).items()}
