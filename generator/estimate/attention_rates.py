"""Attention's rates in a ComputeTable: forward and backward TFLOP/s by kernel path, sequence, head layout, document
length (flex) and head width, read at the measured width nearest the model's. Pure."""

from __future__ import annotations

import math
from functools import cache

from generator.estimate.compute_table import ComputeTable, weighted_rate

ATTENTION_HEAD_DIM = 128
"""The head width the probe's default attention grid runs at (probe.compute_grid.ATTN_LAYOUTS); `probe --compute
--model` adds the model's own layout at its own width."""


def nearest_head_dim(rows, head_dim: int) -> int:
    """The measured head width nearest `head_dim` (by ratio) among attention `rows`."""
    return min({r[4] for r in rows}, key=lambda d: (abs(math.log2(d / head_dim)), -d))


@cache
def attention_tflops(
    table: ComputeTable,
    path: str,
    seq: int,
    heads: int,
    kv_heads: int,
    doc: int | None = None,
    head_dim: int = ATTENTION_HEAD_DIM,
) -> tuple[float, float]:
    """(forward, backward) TFLOP/s on the forward's executed FLOPs of one attention call on `path`, by sequence,
    head layout and (flex) document length, from the rows at the measured head width nearest `head_dim` (a kernel's
    tiles, and so its rate, follow the width: the default grid runs 128 alone). eager reads dense SDPA's rates;
    flex without rows the flash path's."""
    path = {"eager": "sdpa_dense"}.get(path, path)
    doc = min(doc or seq, seq)
    if path == "flex" and not flex_measured_near(table, doc):
        path = "sdpa_causal"  # one causal block per document: the flash path's tiles, at its measured rate
    rows = table.attention.get(path) or table.attention.get("sdpa_causal") or table.attention.get("sdpa_dense")
    if not rows:
        raise ValueError("the compute table has no attention rows")
    width = nearest_head_dim(rows, head_dim)
    rows = [r for r in rows if r[4] == width]
    key = (seq, heads, kv_heads, doc)
    return weighted_rate(rows, key, 4, 5), weighted_rate(rows, key, 4, 6)


HEAD_DIM_NOTE = (
    "speed: attention at head width {dim} is priced from the table's rows at {width} (a kernel's tiles, and its "
    "rate, follow the width); `python -m generator probe --compute --model {model}` times it at {dim}, for `plan "
    "--compute-file`"
)
"""The plan's line where no attention row was timed at the model's head width."""


def unmeasured_head_dim(table: ComputeTable, head_dim: int) -> int | None:
    """The measured width attention at `head_dim` is priced from, where the table has no row at that width (None
    where it has, or has no attention rows)."""
    rows = [r for path_rows in table.attention.values() for r in path_rows]
    width = nearest_head_dim(rows, head_dim) if rows else head_dim
    return None if width == head_dim else width


FLEX_DOC_REACH = 2.0
"""How far (ratio of document lengths) a measured flex row's rate is carried. Beyond it the rate of a block mask
of other-sized documents says little (one H200, 2026-12-01: 168-254 TFLOP/s at 1,024-token documents, at which
train.py's flex LoRA runs with one document per 16,384-token row, DDP and FSDP2, were predicted 11% and 20% slow;
bench/results/h200-x1-sweep-2026-12-01.json fit rows), and the causal flash rows, which run the same tiles, stand in."""


def flex_measured_near(table: ComputeTable, doc: int) -> bool:
    """Whether the table has a flex row within FLEX_DOC_REACH of this document length."""
    return any(max(r[3], doc) <= FLEX_DOC_REACH * min(r[3], doc) for r in table.attention.get("flex", ()))
