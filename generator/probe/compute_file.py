"""The compute file `probe --compute` writes and `plan --compute-file` reads (format: generator/probe/compute.py).
Reading needs no torch: the document is parsed by generator.estimate.compute_table."""

from __future__ import annotations

from generator.errors import UserError
from generator.estimate.compute_table import ComputeTable, from_document
from generator.fileio import read_json


def load_compute_file(path: str) -> ComputeTable:
    """The operator-rate table of one GPU, measured where the file says (UserError on anything malformed)."""
    doc = read_json(path, "compute file", max_bytes=16 * 1024 * 1024)
    measured_at = (doc.get("method") or {}).get("measured_at") if isinstance(doc, dict) else None
    source = f"{path} (probe --compute on {doc.get('gpu') if isinstance(doc, dict) else '?'}, {measured_at})"
    try:
        table = from_document(doc, source)
    except (ValueError, KeyError, TypeError, ArithmeticError) as exc:  # ArithmeticError: int() of an infinity
        raise UserError(f"compute file {path!r}: {exc}; write it with `python -m generator probe --compute`") from None
    return table
