"""Attention's rates in a ComputeTable: forward and backward TFLOP/s by kernel path, sequence, head layout, document
length (flex) and head width, read at the measured width nearest the model's. Pure."""

from __future__ import annotations

import math
from functools import cache

from generator.estimate.attention import rates_path, takes_math_kernel
from generator.estimate.compute_table import ComputeTable, weighted_rate
from generator.estimate.types import Workload
from generator.model.types import ModelSpec

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
    flex without rows the flash path's; SDPA's math kernel its own rows (priced_path decides when they are read)."""
    if path == "eager":
        path = "sdpa_dense"
    doc = min(doc or seq, seq)
    if path == "flex" and not flex_measured_near(table, doc, head_dim):
        path = "sdpa_causal"  # one causal block per document: the flash path's tiles, at its measured rate
    rows = table.attention.get(path) or table.attention.get("sdpa_causal") or table.attention.get("sdpa_dense")
    if not rows:
        raise ValueError("the compute table has no attention rows")
    width = nearest_head_dim(rows, head_dim)
    rows = [r for r in rows if r[4] == width]
    key = (seq, heads, kv_heads, doc)
    return weighted_rate(rows, key, 4, 5), weighted_rate(rows, key, 4, 6)


MATH_KERNEL_NOTE = (
    "speed: {model}'s attention takes SDPA's math kernel (every score in fp32), priced here at the fused kernel's "
    "rate: {why}. The step is at most as fast as predicted (one H200, Falcon-7B's shape under transformers 5.17, LoRA "
    "at 2,048 x 2: 4,119 tokens/s eager and 7,995 compiled where 8,818 and 14,644 were priced so; "
    "bench/results/h200-x1-falcon-memory-2026-12-06.json)"
)
"""The plan's line where the model's attention takes SDPA's math kernel and is priced at the dense kernel's rate."""
MATH_WHY = {
    "compiled": "compiled layers trace it and inductor rewrites it, which no row times",
    "unmeasured": "the table has no rows of it; `python -m generator probe --compute --model {model}` times it",
}


def priced_path(table: ComputeTable, model: ModelSpec, workload: Workload) -> tuple[str, str | None]:
    """(the path whose rows price the workload's attention, why SDPA's math kernel is priced at the dense kernel's rate
    (a MATH_WHY key) or None): the one place that decides both, so the plan's note says what the price did.
    attention.rates_path gives the kernel; eager math layers without rows of their own read dense SDPA's (an upper
    bound); compiled ones are there already (inductor rewrites the kernel)."""
    path = rates_path(model, workload)
    if not takes_math_kernel(model, workload):
        return path, None
    if workload.layers_compiled:
        return path, "compiled"
    return (path, None) if table.attention.get("sdpa_math") else ("sdpa_dense", "unmeasured")


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


def flex_measured_near(table: ComputeTable, doc: int, head_dim: int = ATTENTION_HEAD_DIM) -> bool:
    """Whether the table has a flex row within FLEX_DOC_REACH of this document length at the width the rates would
    be read from (nearest_head_dim): a row near the document at another width does not vouch for the rows at this
    one. A 256-wide flex row timed at 1,024-token documents had priced Gemma-2's filled 8,192-token rows at its 118
    TFLOP/s, because 128-wide rows were near the document (the H100 probe of bench/models/gemma2-default.json,
    2026-12-06)."""
    rows = table.attention.get("flex", ())
    width = nearest_head_dim(rows, head_dim) if rows else head_dim
    return any(r[4] == width and max(r[3], doc) <= FLEX_DOC_REACH * min(r[3], doc) for r in rows)
