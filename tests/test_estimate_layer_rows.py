"""Issue 26: whole-layer rows at several token counts (estimate.compute_time._layers_s), and QLoRA's per-expert NF4
layers priced from their own rows (bench/scripts/qlora_layer.py) with the dequantisation inside them."""

import copy
import json
from dataclasses import replace

import pytest

from generator.estimate import Placement, Workload
from generator.estimate.comm import Comm
from generator.estimate.compute_source import SHIPPED
from generator.estimate.compute_table import from_document
from generator.estimate.compute_time import compute_time
from generator.estimate.timing import step_timing
from generator.model import load_model

ONE = Placement(num_gpus_per_machine=1, gpu_name="NVIDIA H200", gpu_memory_gb=150.75, busbw_gbps=0)
MIXTRAL, MISTRAL = load_model("mixtral-8x7b"), load_model("mistral-7b")
QLORA = Workload(method="qlora", seq_len=4096, micro_batch=1, grad_checkpointing=False, load_dtype="bf16")


def _row(variant: str, mb: int, seq: int, fwd_ms: float, fwdbwd_ms: float, ckpt_ms: float | None = None) -> dict:
    m = MIXTRAL
    row = {"model": "mixtral-8x7b", "model_type": "mixtral", "hidden": m.hidden_size,
           "intermediate": m.intermediate_size, "heads": m.num_heads, "kv_heads": m.num_kv_heads,
           "experts": m.num_experts, "top_k": m.experts_per_token, "variant": variant, "mb": mb, "seq": seq,
           "depths": [1, 3], "fwd_ms_per_layer": fwd_ms, "fwdbwd_ms_per_layer": fwdbwd_ms}  # fmt: skip
    return row if ckpt_ms is None else {**row, "ckpt_ms_per_layer": ckpt_ms}


def _table(*rows: dict):
    doc = copy.deepcopy(json.loads(SHIPPED.read_text()))
    doc["layers"] = list(rows)
    doc["measured"] = False  # read as given: a measured file's missing rows would be taken from the shipped table
    return from_document(doc, "test rows")


def _layers(table, seq: int, mb: int, workload: Workload = QLORA) -> float:
    return compute_time(table, MIXTRAL, replace(workload, seq_len=seq, micro_batch=mb), "ddp").layers_s


def test_two_token_counts_give_a_fixed_part_that_one_row_would_spread():
    """A loop with a fixed cost per layer (40 ms a layer forward and backward at any size, then 10 ms per 1,024
    tokens): read along the line through the two rows, the step at 4,096 tokens costs a third of the way between the
    rows, not half the larger row, and the rows' own sizes come back as measured."""
    two = _table(_row("qlora", 1, 2048, 20.0, 60.0), _row("qlora", 2, 4096, 50.0, 120.0))
    one = _table(_row("qlora", 2, 4096, 50.0, 120.0))
    small, middle, large = _layers(two, 2048, 1), _layers(two, 4096, 1), _layers(two, 4096, 2)
    assert middle == pytest.approx(small + (large - small) / 3, rel=1e-6)
    assert middle > large / 2  # the fixed part: proportional scaling would halve the larger row
    assert _layers(one, 4096, 2) == pytest.approx(large) and _layers(one, 4096, 1) == pytest.approx(large / 2)
    # past the largest row the line goes on; below the smallest it keeps the fixed part
    assert _layers(two, 8192, 2) == pytest.approx(large + 2 * (large - small) / 3 * 2, rel=1e-6)
    assert _layers(two, 1024, 1) > small / 2


def test_rows_whose_cost_falls_with_the_tokens_scale_from_the_nearest():
    """Noise can put a smaller row above a larger one: no line with a negative slope, the nearest row scales."""
    noisy = _table(_row("qlora", 1, 2048, 40.0, 130.0), _row("qlora", 2, 4096, 40.0, 120.0))
    assert _layers(noisy, 4096, 2) * 2 == pytest.approx(_layers(noisy, 8192, 2), rel=1e-6)
    assert _layers(noisy, 1024, 1) * 2 == pytest.approx(_layers(noisy, 2048, 1), rel=1e-6)


def test_qlora_rows_price_mixtral_qlora_and_hold_its_dequantisation():
    """A qlora row prices Mixtral's QLoRA layers (per-expert NF4 loop) and the estimator then leaves the
    dequantisation bytes out (the row ran them); LoRA keeps to the frozen rows, dense QLoRA to its operators."""
    rows = _table(_row("qlora", 1, 2048, 20.0, 60.0), _row("qlora", 2, 4096, 50.0, 120.0))
    plain = _table()
    assert _layers(rows, 4096, 1) > 0 and _layers(plain, 4096, 1) == 0
    lora = replace(QLORA, method="lora")
    assert _layers(rows, 4096, 1, lora) == 0  # no frozen row in this table
    dense = compute_time(rows, MISTRAL, QLORA, "ddp")
    assert dense.layers_s == 0 and dense.gpu_s == pytest.approx(compute_time(plain, MISTRAL, QLORA, "ddp").gpu_s)

    def memory(table):
        return step_timing(MIXTRAL, QLORA, replace(ONE, compute=table), "ddp", Comm(0.0, 0.0, 0.0)).memory_s

    assert memory(rows) < memory(plain)
    # what is left is the adapters' and the optimizer's traffic: the same with or without the row for a dense model
    assert step_timing(
        MISTRAL, QLORA, replace(ONE, compute=rows), "ddp", Comm(0.0, 0.0, 0.0)
    ).memory_s == pytest.approx(
        step_timing(MISTRAL, QLORA, replace(ONE, compute=plain), "ddp", Comm(0.0, 0.0, 0.0)).memory_s
    )


def test_a_checkpointed_step_reads_the_rows_checkpointed_time_where_it_was_timed():
    """Checkpointing reruns the forward under the checkpoint's hooks. A row timed that way prices a checkpointed step
    from that time (here, synthetically, 30 ms above forward twice plus backward); a row without it, as rows timed
    before, prices it as a second forward; a step without checkpointing ignores it."""
    ckpt = replace(QLORA, grad_checkpointing=True)
    plain = _table(_row("qlora", 2, 4096, 50.0, 120.0))
    timed = _table(_row("qlora", 2, 4096, 50.0, 120.0, ckpt_ms=200.0))
    assert _layers(timed, 4096, 2, ckpt) == pytest.approx(_layers(plain, 4096, 2, ckpt) + MIXTRAL.num_layers * 0.030)
    assert _layers(timed, 4096, 2) == pytest.approx(_layers(plain, 4096, 2))


def test_a_later_row_of_the_same_size_replaces_the_earlier():
    table = _table(_row("qlora", 2, 4096, 50.0, 120.0), _row("qlora", 1, 8192, 25.0, 60.0))
    key = next(iter(table.layers))
    assert len(table.layers[key]) == 1 and table.layers[key][0][:2] == (1, 8192)


def test_the_bench_script_writes_qlora_rows_the_table_reads(tmp_path):
    """bench/scripts/qlora_layer.py on CPU (widths cut to a toy): train.py's NF4 Mixtral layers timed at two sizes,
    rows the compute table reads under the qlora variant, in order of size."""
    pytest.importorskip("bitsandbytes")
    from bench.scripts import qlora_layer

    rows, skipped = qlora_layer.rows("mixtral-8x7b", [(1, 16), (2, 16)], "cpu", budget_s=60.0)
    assert not skipped and [r["variant"] for r in rows] == ["qlora", "qlora"] and rows[0]["experts"] == 4
    doc = copy.deepcopy(json.loads(SHIPPED.read_text()))
    doc["layers"] = rows
    (rows_read,) = from_document(doc, "cpu rows").layers.values()
    assert [(mb, seq) for mb, seq, *_ in rows_read] == [(1, 16), (2, 16)]
    # timed under checkpointing too; a toy layer's time on a loaded CPU is noise, so only its presence is checked
    # (the probe reads a depth difference below zero as zero)
    assert all(ckpt is not None and ckpt >= 0 for *_, ckpt in rows_read)
