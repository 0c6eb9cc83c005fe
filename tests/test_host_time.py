"""A named model's own host rows (`probe --compute --model`): read for that model ahead of the Mistral layer's,
carried across levers at the model's measured ratio, and filled in from the shipped table by a file without them."""

import copy
import json
from dataclasses import replace

import pytest

from generator.estimate import Placement, Workload, estimate
from generator.estimate.compute_complete import completed
from generator.estimate.compute_table import from_document
from generator.estimate.compute_time import compute_time
from generator.estimate.host_time import host_layer_s, host_step_s, model_key
from generator.model import load_model
from tests.test_estimate_operators import _doc

ONE = Placement(num_gpus_per_machine=1, gpu_name="NVIDIA H200", gpu_memory_gb=150.75, busbw_gbps=0)
MISTRAL, QWEN, MIXTRAL = (load_model(m) for m in ("mistral-7b", "qwen2.5-7b", "mixtral-8x7b"))


def _row(variant: str, compiled: bool, per_layer_ms: float, step_ms: float, model=None) -> dict:
    row = {"variant": variant, "compiled": compiled, "liger": False, "layers": 6, "tokens": 64,
           "fwd_ms_per_layer": per_layer_ms / 4, "fwdbwd_ms_per_layer": per_layer_ms, "step_ms": step_ms}  # fmt: skip
    if model is not None:
        row.update(model=model.name, model_type=model.model_type, experts=model.num_experts,
                   top_k=model.experts_per_token)  # fmt: skip
    return row


def _table(rows: list[dict]):
    doc = _doc()
    doc["host"] = rows
    return from_document(doc, "host rows")


MISTRAL_ROWS = [_row("lora", False, 6.0, 10.0), _row("lora", True, 2.0, 8.0), _row("full", False, 5.0, 12.0)]


def test_a_models_own_row_is_read_for_that_model_only():
    table = _table([*MISTRAL_ROWS, _row("lora", False, 9.0, 20.0, model=QWEN)])
    lora = ("lora", False, False)
    assert host_layer_s(table, *lora, model=model_key(QWEN)) == pytest.approx((2.25e-3, 6.75e-3))
    assert host_step_s(table, *lora, model=model_key(QWEN)) == pytest.approx(20e-3)
    assert host_layer_s(table, *lora, model=model_key(MISTRAL)) == pytest.approx((1.5e-3, 4.5e-3))
    assert host_layer_s(table, *lora, model=model_key(MIXTRAL)) == host_layer_s(table, *lora)
    assert table.host == _table(MISTRAL_ROWS).host  # own rows never enter the Mistral layer's


def test_a_lever_the_model_was_not_timed_with_takes_the_mistral_row_at_its_ratio():
    """Qwen timed eager only, at 1.5x the Mistral layer: its compiled layer is priced at 1.5x Mistral's compiled
    row, its step outside the layers at Mistral's (the same code for any decoder)."""
    table = _table([*MISTRAL_ROWS, _row("lora", False, 9.0, 20.0, model=QWEN)])
    compiled = ("lora", True, False)
    f, b = host_layer_s(table, *compiled, model=model_key(QWEN))
    assert f + b == pytest.approx(1.5 * sum(host_layer_s(table, *compiled)))
    assert host_step_s(table, *compiled, model=model_key(QWEN)) == pytest.approx(8e-3)


def test_own_rows_move_a_host_bound_prediction_and_only_that_models():
    """LoRA at 2,048 x 1 is host-bound on the shipped table (the plan says so); rows of Qwen's own layer three times
    the Mistral layer's make its step slower, and leave Mistral's as it was."""
    w = Workload(method="lora", seq_len=2048, micro_batch=1, grad_checkpointing=False, load_dtype="bf16")
    base = _table(MISTRAL_ROWS)
    slow = _table([*MISTRAL_ROWS, _row("lora", False, 18.0, 10.0, model=QWEN)])
    assert compute_time(slow, QWEN, w, "ddp").host_s > 2.5 * compute_time(base, QWEN, w, "ddp").host_s
    at = lambda table, m: estimate(m, w, replace(ONE, compute=table), "ddp")  # noqa: E731
    assert at(slow, QWEN).step_s > at(base, QWEN).step_s
    assert at(slow, QWEN).host_bound
    assert at(slow, MISTRAL).step_s == at(base, MISTRAL).step_s


def test_a_file_without_own_rows_takes_the_references_at_its_cpus_ratio():
    ref = _table([*MISTRAL_ROWS, _row("lora", False, 9.0, 20.0, model=QWEN)])
    doc = copy.deepcopy(_doc())
    doc["host"] = [_row("lora", False, 12.0, 20.0)]  # this CPU: twice the reference's Mistral layer
    user = from_document(doc, "user")
    filled = completed(user, ref)
    assert "other models' own host rows" in filled.filled
    f, b = host_layer_s(filled, "lora", False, False, model=model_key(QWEN))
    assert f + b == pytest.approx(2 * 9e-3)


def test_a_qlora_row_prices_that_models_qlora_steps_and_nothing_else():
    """Rows of train.py's NF4 Mixtral layer (bench/scripts/qlora_host.py) price Mixtral's QLoRA host; its LoRA steps
    keep the Mistral rows, and a QLoRA model without a row of its own is priced as a LoRA layer."""
    table = _table([*MISTRAL_ROWS, {**_row("lora", False, 40.0, 30.0, model=MIXTRAL), "variant": "qlora"}])
    mixtral = model_key(MIXTRAL)
    assert host_layer_s(table, "qlora", False, model=mixtral) == pytest.approx((10e-3, 30e-3))
    assert host_step_s(table, "qlora", False, model=mixtral) == pytest.approx(30e-3)
    assert host_layer_s(table, "lora", False, model=mixtral) == host_layer_s(table, "lora", False)
    assert host_layer_s(table, "qlora", False, model=model_key(MISTRAL)) == host_layer_s(table, "lora", False)
    w = Workload(method="qlora", seq_len=4096, micro_batch=1, grad_checkpointing=True, load_dtype="bf16")
    assert compute_time(table, MIXTRAL, w, "ddp").host_s == pytest.approx(32 * (2 * 10e-3 + 30e-3) + 30e-3)


def test_the_bench_script_times_train_py_s_qlora_layer_for_the_table(tmp_path):
    """bench/scripts/qlora_host.py on CPU: train.py's NF4 Mixtral at tiny widths with its eight experts, one qlora row
    under Mixtral's key, which the table reads for it (the times of a toy on a shared CPU are not checked)."""
    pytest.importorskip("bitsandbytes")
    from bench.scripts import qlora_host

    out = tmp_path / "qlora-host.json"
    qlora_host.main(["--model", "mixtral-8x7b", "--rounds", "2", "--out", str(out)])
    doc = json.loads(out.read_text())
    (row,) = doc["host"]
    assert (row["variant"], row["experts"], row["top_k"]) == ("qlora", 8, 2) and doc["kind"] == "qlora-host"
    table = _table([*MISTRAL_ROWS, *doc["host"]])
    assert set(table.host_models) == {model_key(MIXTRAL)}
    assert ("qlora", False, False) in table.host_models[model_key(MIXTRAL)][0]
