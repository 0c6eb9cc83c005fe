"""The compute file `probe --compute` writes and `plan --compute-file` reads (format: generator/probe/compute.py).
Reading needs no torch: the document is parsed by generator.estimate.compute_table."""

from __future__ import annotations

import json

from generator.errors import UserError
from generator.estimate.compute_table import ComputeTable, from_document
from generator.fileio import read_text


def load_compute_file(path: str) -> ComputeTable:
    """The operator-rate table of one GPU, measured where the file says (UserError on anything malformed)."""
    text = read_text(path, "compute file", max_bytes=16 * 1024 * 1024)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"compute file {path!r} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    measured_at = (doc.get("method") or {}).get("measured_at") if isinstance(doc, dict) else None
    source = f"{path} (probe --compute on {doc.get('gpu') if isinstance(doc, dict) else '?'}, {measured_at})"
    try:
        table = from_document(doc, source)
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"compute file {path!r}: {exc}; write it with `python -m generator probe --compute`") from None
    return table
