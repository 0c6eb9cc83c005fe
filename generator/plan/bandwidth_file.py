"""Measured all-reduce bandwidth per GPU subset, as written by `python -m generator probe`.

Format (JSON, one object):
    {"subsets": {"0,1": 365.2, "0,1,2,3": {"all_reduce": 330.0, ...}, ...}, ...any other keys are ignored...}
Keys are comma-separated PCI-order GPU indices (any order, no duplicates); values are all-reduce bus bandwidth in GB/s
(nccl-tests definition), either bare or as the "all_reduce" entry of the object `probe` writes
(generator/probe/bandwidth_file.py). The planner prefers a measured value over the topology table for the exact same
subset, and a measured subset over the table's pick when it is faster.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from generator.errors import UserError
from generator.fileio import read_text

MeasuredBandwidth = Mapping[frozenset[int], float]
"""GPU subset -> measured busbw, GB/s."""


def parse_bandwidth(text: str, where: str = "bandwidth file") -> dict[frozenset[int], float]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{where} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    subsets = data.get("subsets") if isinstance(data, dict) else None
    if not isinstance(subsets, dict):
        raise UserError(f'{where} has no "subsets" object; expected {{"subsets": {{"0,1": 365.2}}}}')
    out: dict[frozenset[int], float] = {}
    for key, value in subsets.items():
        if isinstance(value, dict):
            value = value.get("all_reduce")
        try:
            ids = [int(part) for part in str(key).split(",")]
        except ValueError:
            raise UserError(f"{where}: subset {key!r} is not a comma-separated list of GPU indices") from None
        if len(set(ids)) != len(ids) or min(ids) < 0:
            raise UserError(f"{where}: subset {key!r} repeats a GPU or has a negative index")
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise UserError(f"{where}: bandwidth for {key!r} must be a positive number of GB/s, got {value!r}")
        out[frozenset(ids)] = float(value)
    return out


def load_bandwidth_file(path: str) -> dict[frozenset[int], float]:
    return parse_bandwidth(read_text(path, "bandwidth file"), f"bandwidth file {path!r}")
