"""Measured all-reduce bandwidth per GPU subset, as the planner uses it.

The file format belongs to `python -m generator probe` (generator/probe/bandwidth_file.py reads and writes it; a
hand-written {"subsets": {"0,1": 365.2}} is accepted too); the `plan` command reads the file and hands the planner
this mapping, so the planner itself reads no file. The planner prefers a measured value over the topology table for
the exact same subset, and a measured subset over the table's pick when it is faster.
"""

from __future__ import annotations

from collections.abc import Mapping

MeasuredBandwidth = Mapping[frozenset[int], float]
"""GPU subset -> measured busbw, GB/s."""
