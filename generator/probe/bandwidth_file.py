"""The bandwidth file `probe` writes and `plan --bandwidth-file` reads. JSON, no torch:

{"version": 1, "machine": str, "gpus": [int, ...],
 "subsets": {"0,1": {"all_reduce": busbw_gbps_at_largest_size, "all_gather": ..., "reduce_scatter": ...,
                     "sizes": {"1M": {"all_reduce": busbw, ...}, ...}}},
 "env": {"torch": ..., "nccl": ..., "driver": ..., "backend": ..., "device": ...}}
"""

from __future__ import annotations

import json
import math

from generator.errors import UserError
from generator.fileio import atomic_write, read_json
from generator.probe.collectives import format_size

VERSION = 1


def build_document(machine: str, gpus: list[int], results: dict, env: dict) -> dict:
    """`results`: subset key -> list of collectives.Measurement."""
    subsets = {}
    for key, measurements in results.items():
        if not measurements:
            continue
        entry: dict = {"sizes": {}}
        for m in sorted(measurements, key=lambda m: m.size_bytes):
            entry["sizes"].setdefault(format_size(m.size_bytes), {})[m.collective] = round(m.busbw_gbps, 3)
            entry[m.collective] = round(m.busbw_gbps, 3)  # ascending sizes: the largest size wins
        subsets[key] = entry
    return {"version": VERSION, "machine": machine, "gpus": list(gpus), "subsets": subsets, "env": env}


def write_bandwidth_file(path: str, doc: dict, force: bool = False) -> str:
    return str(atomic_write(path, json.dumps(doc, indent=2) + "\n", force=force))


def load_bandwidth_document(path: str) -> dict:
    """The whole validated document."""
    doc = read_json(path, "bandwidth file", max_bytes=4 * 1024 * 1024)
    # "version" may be left out of a hand-written {"subsets": {"0,1": 365.2}}; a different version is refused.
    if not isinstance(doc, dict) or doc.get("version", VERSION) != VERSION or not isinstance(doc.get("subsets"), dict):
        raise UserError(
            f"bandwidth file {path!r} is not a version-{VERSION} file from `python -m generator probe` "
            '(or a hand-written {"subsets": {"0,1": 365.2}})'
        )
    return doc


def load_bandwidth_file(path: str) -> dict[tuple[int, ...], float]:
    """Measured all-reduce bus bandwidth (GB/s, largest message) per GPU subset, keyed by sorted GPU ids."""
    doc = load_bandwidth_document(path)
    out: dict[tuple[int, ...], float] = {}
    for key, entry in doc["subsets"].items():
        try:
            ids = tuple(sorted(int(part) for part in str(key).split(",")))
        except ValueError:
            raise UserError(f"bandwidth file {path!r}: subset {key!r} is not a comma list of GPU ids") from None
        # A bare number is accepted too: the hand-written {"subsets": {"0,1": 365.2}} form generator.plan reads.
        value = entry.get("all_reduce") if isinstance(entry, dict) else entry
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise UserError(f"bandwidth file {path!r}: subset {key!r} has no positive all_reduce bandwidth")
        if len(ids) < 2 or len(set(ids)) != len(ids) or min(ids) < 0:
            raise UserError(f"bandwidth file {path!r}: subset {key!r} needs two or more distinct GPU ids")
        out[ids] = float(value)
    return out
