"""Attention is priced from the rows timed at the model's head width where the compute table has them (`probe
--compute --model` times its own layout at its own width; the default grid runs 128 alone), and a model whose width
no row has is told so: Gemma-2's 256-wide heads were priced at the 128-wide rate with nothing said."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from generator.estimate import Placement, Workload, estimate
from generator.estimate.attention_rates import attention_tflops, unmeasured_head_dim
from generator.estimate.compute_source import SHIPPED
from generator.estimate.compute_table import from_document
from generator.model import load_model

ONE = Placement(num_gpus_per_machine=1, gpu_name="NVIDIA H200", gpu_memory_gb=150.75, busbw_gbps=0)
WIDE = replace(load_model("mistral-7b"), head_dim=256, num_heads=16, num_kv_heads=8, name="wide-heads")
"""Mistral's layer with Gemma-2's head layout (16 query heads, 8 kv heads, 256 wide)."""


def _with_wide_rows(slower: float) -> dict:
    """The shipped table plus the 256-wide layout's rows, each `slower` times the 128-wide row of its shape."""
    doc = json.loads(SHIPPED.read_text())
    wide = []
    for r in doc["attention"]:
        if (r["heads"], r["kv_heads"]) == (32, 8) and r["head_dim"] == 128:
            wide.append(dict(r, heads=16, kv_heads=8, head_dim=256, fwd_ms=r["fwd_ms"] * slower,
                             fwdbwd_ms=r["fwdbwd_ms"] * slower))  # fmt: skip
    assert wide
    doc["attention"] += wide
    return doc


def test_rows_at_the_models_width_price_its_attention_and_move_the_step_the_right_way():
    shipped = from_document(json.loads(SHIPPED.read_text()), "shipped")
    measured = from_document(_with_wide_rows(slower=2.0), "with 256-wide rows")
    # the same FLOPs at the same (heads x width) product: twice the time is half the rate
    narrow = attention_tflops(measured, "sdpa_causal", 4096, 32, 8, head_dim=128)
    wide = attention_tflops(measured, "sdpa_causal", 4096, 16, 8, head_dim=256)
    assert wide[0] == pytest.approx(narrow[0] / 2, rel=1e-6) and wide[1] == pytest.approx(narrow[1] / 2, rel=1e-6)
    assert attention_tflops(measured, "sdpa_causal", 4096, 32, 8) == attention_tflops(
        shipped, "sdpa_causal", 4096, 32, 8
    )  # 128 wide: as before
    w = Workload(method="lora", seq_len=8192, micro_batch=1)
    before, after = (estimate(WIDE, w, replace(ONE, compute=t), "ddp") for t in (shipped, measured))
    assert after.step_s > before.step_s
    note = "attention at head width 256 is priced from the table's rows at 128"
    assert any(note in n for n in before.notes) and not any(note in n for n in after.notes)


def test_the_nearest_measured_width_stands_in_and_a_128_wide_model_is_not_told():
    measured = from_document(_with_wide_rows(slower=2.0), "with 256-wide rows")
    assert unmeasured_head_dim(measured, 192) == 256 and unmeasured_head_dim(measured, 96) == 128
    assert unmeasured_head_dim(measured, 256) is None and unmeasured_head_dim(measured, 128) is None
    shipped = from_document(json.loads(SHIPPED.read_text()), "shipped")
    mistral = estimate(load_model("mistral-7b"), Workload(), replace(ONE, compute=shipped), "ddp")
    assert not any("head width" in n for n in mistral.notes)


def test_flex_at_a_width_timed_only_far_from_the_document_reads_the_flash_rows_at_that_width():
    """A flex row at the model's width but another document length does not price it, however near the 128-wide flex
    rows are to the document: one 256-wide row at 1,024-token documents had priced filled 8,192-token rows at its
    own rate (2.4x the flash rows' time on Gemma-2's shape)."""
    doc = _with_wide_rows(slower=1.25)
    wide_flash = next(r for r in doc["attention"] if r["head_dim"] == 256 and r["path"] == "sdpa_causal")
    doc["attention"] = [r for r in doc["attention"] if not (r["head_dim"] == 256 and r["path"] == "flex")]
    doc["attention"].append(dict(wide_flash, path="flex", seq=4096, mb=4, doc=1024, fwd_ms=9.0, fwdbwd_ms=30.0))
    table = from_document(doc, "256-wide flash rows and one far flex row")
    flash = attention_tflops(table, "sdpa_causal", 8192, 16, 8, head_dim=256)
    assert attention_tflops(table, "flex", 8192, 16, 8, doc=8192, head_dim=256) == flash
    assert attention_tflops(table, "flex", 4096, 16, 8, doc=1024, head_dim=256) != flash  # near its own document
    assert attention_tflops(table, "flex", 8192, 32, 8, doc=8192) == attention_tflops(
        from_document(_with_wide_rows(slower=1.25), "without the far row"), "flex", 8192, 32, 8, doc=8192
    )  # 128 wide: its own flex rows, as before
