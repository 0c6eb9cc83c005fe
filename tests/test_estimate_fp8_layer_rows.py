"""Issue 26: a model's own float8 layers timed whole (`probe --compute --full --model M`: compute_layers with train.py's
float8 Linears) price its float8 steps, dense or MoE, in place of the casts' elements at one fitted rate; where the
table has no such row the plan says how to time one."""

import copy
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from generator.estimate import Placement, Workload, estimate
from generator.estimate.comm import Comm
from generator.estimate.compute_source import SHIPPED
from generator.estimate.compute_table import FP8_ROW, from_document
from generator.estimate.compute_time import compute_time
from generator.estimate.layer_rows import fp8_layers_in_row
from generator.estimate.timing import step_timing
from generator.model import load_model

ROOT = Path(__file__).resolve().parents[1]
ONE = Placement(num_gpus_per_machine=1, gpu_name="NVIDIA H200", gpu_memory_gb=150.75, busbw_gbps=0)
MISTRAL = load_model("mistral-7b")
FULL = Workload(method="full", seq_len=4096, micro_batch=2, load_dtype="fp32", precision="fp8",
                grad_checkpointing=False)  # fmt: skip
LORA = replace(FULL, method="lora", load_dtype="bf16")


def _row(variant: str, fwd_ms: float, fwdbwd_ms: float, fp8: bool = True, mb: int = 2, seq: int = 4096) -> dict:
    """A float8 row as compute_layers.layer_row writes it (times made up for the test, not measured)."""
    m = MISTRAL
    row = {"model": "mistral-7b", "model_type": "mistral", "hidden": m.hidden_size, "intermediate": m.intermediate_size,
           "heads": m.num_heads, "kv_heads": m.num_kv_heads, "experts": 0, "top_k": 0, "variant": variant,
           "compiled": True, "mb": mb, "seq": seq, "depths": [1, 3], "fwd_ms_per_layer": fwd_ms,
           "fwdbwd_ms_per_layer": fwdbwd_ms, "ckpt_ms_per_layer": None}  # fmt: skip
    return {**row, "precision": "fp8", "weights": "fp32" if variant == "full" else "bf16"} if fp8 else row


def _doc(*rows: dict) -> dict:
    doc = copy.deepcopy(json.loads(SHIPPED.read_text()))
    doc["layers"] = list(rows)
    doc["measured"] = False  # read as given: a measured file's missing rows would be taken from the shipped table
    return doc


def _table(*rows: dict):
    return from_document(_doc(*rows), "test rows")


def _gpu_s(table, workload: Workload = FULL) -> float:
    return compute_time(table, MISTRAL, workload, "ddp").gpu_s


def test_a_float8_row_is_its_own_variant_and_a_bf16_one_of_a_dense_model_is_not_read():
    table = _table(_row("full", 6.0, 19.0), _row("frozen", 4.0, 10.0))
    dims = (MISTRAL.hidden_size, MISTRAL.intermediate_size, MISTRAL.num_heads, MISTRAL.num_kv_heads, 0, 0)
    assert set(table.layers) == {(*dims, "full" + FP8_ROW, True), (*dims, "frozen" + FP8_ROW, True)}
    plain = _table()
    bf16 = replace(FULL, precision="bf16", compiled_layers=True)
    # a dense model's bf16 layers stay with their operators, validated so; a bf16 row of one is not read
    assert _gpu_s(_table(_row("full", 6.0, 19.0, fp8=False)), bf16) == pytest.approx(_gpu_s(plain, bf16))
    assert _gpu_s(table, bf16) == pytest.approx(_gpu_s(plain, bf16))


def test_the_rows_price_the_float8_layers_in_the_direction_they_were_timed():
    """Twice the time a layer -> the step's layers cost twice as much (attention put back at the step's shape), and
    the LoRA step reads the frozen row, not the trained one."""
    slow, fast = _table(_row("full", 12.0, 38.0)), _table(_row("full", 6.0, 19.0))
    assert fp8_layers_in_row(fast, MISTRAL, FULL, "ddp") and not fp8_layers_in_row(_table(), MISTRAL, FULL, "ddp")
    a, b = compute_time(slow, MISTRAL, FULL, "ddp"), compute_time(fast, MISTRAL, FULL, "ddp")
    assert a.fp8_cast_s == b.fp8_cast_s == 0  # the row holds the casts
    assert a.layers_s > 2 * b.layers_s > 0  # attention, taken out at the row's shape, is less than the row
    assert a.gpu_s > b.gpu_s
    assert not fp8_layers_in_row(fast, MISTRAL, LORA, "ddp")
    frozen = _table(_row("full", 6.0, 19.0), _row("frozen", 8.0, 20.0))
    assert fp8_layers_in_row(frozen, MISTRAL, LORA, "ddp")
    assert _gpu_s(frozen, LORA) > _gpu_s(_table(_row("frozen", 4.0, 10.0)), LORA)


def test_liger_is_priced_as_the_operators_difference_on_top_of_the_row():
    table = _table(_row("full", 6.0, 19.0))
    liger = replace(FULL, liger=True)
    with_row, ops = compute_time(table, MISTRAL, liger, "ddp"), compute_time(_table(), MISTRAL, liger, "ddp")
    lever = _gpu_s(_table(), liger) - _gpu_s(_table())
    assert with_row.gpu_s == pytest.approx(_gpu_s(table) + lever, rel=1e-6)
    assert ops.layers_s == 0


def test_a_row_timed_at_fp32_weights_holds_the_layers_weight_casts():
    """The full float8 row ran at fp32 weights (train.py's), so torchao's casts of those weights and their fp32
    gradients ran inside it: the step's memory traffic counts only the weights outside the layers."""
    row = _table(_row("full", 6.0, 19.0))

    def memory(table, workload=FULL):
        return step_timing(MISTRAL, workload, replace(ONE, compute=table), "ddp", Comm(0.0, 0.0, 0.0)).memory_s

    outside = MISTRAL.params_total - MISTRAL.num_layers * MISTRAL.params_per_layer
    saved = MISTRAL.num_layers * MISTRAL.params_per_layer * (6.0 + 6.0)  # one forward's casts, the gradients'
    assert memory(_table()) - memory(row) == pytest.approx(saved / (row.hbm_gbps * 1e9), rel=1e-6)
    assert outside > 0
    assert memory(row, LORA) == pytest.approx(memory(_table(), LORA))  # LoRA loads bf16: no autocast casts


def test_the_plan_names_where_its_float8_layers_are_priced(tmp_path):
    own = estimate(MISTRAL, FULL, replace(ONE, compute=_table(_row("full", 6.0, 19.0))), "ddp")
    ops = estimate(MISTRAL, FULL, ONE, "ddp")
    assert any("mistral-7b's own float8 layer rows" in n for n in own.notes)
    hint = "probe --compute --full --model mistral-7b"
    assert any(hint in n for n in ops.notes) and not any(hint in n for n in own.notes)
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(_doc(_row("full", 30.0, 95.0))))

    def plan(*extra):
        args = ["--model", "mistral-7b", "--machine", "h200-sxm-2", "--num-gpus", "1", "--method", "full",
                "--precision", "fp8", "--json", *extra]  # fmt: skip
        r = subprocess.run([sys.executable, "-m", "generator", "plan", *args], cwd=ROOT, capture_output=True,
                           timeout=120)  # fmt: skip
        assert r.returncode == 0, r.stderr.decode()[-2000:]
        return {e["strategy"]: e["tokens_per_s_per_gpu"] for e in json.loads(r.stdout)["estimates"]}

    base, slow = plan(), plan("--compute-file", str(path))
    assert slow["ddp"] < 0.5 * base["ddp"]


def test_the_probe_times_float8_rows_the_table_reads():
    """On the CPU (a toy width): train.py's float8 Linears at its weights, both variants, read back as float8 rows."""
    pytest.importorskip("torchao.float8")
    pytest.importorskip("transformers")
    from generator.probe.clock import Clock
    from generator.probe.compute_layers import hf_config_dict, layer_rows

    clock = Clock.for_device("cpu")
    rows = layer_rows(clock, [("mistral-7b", hf_config_dict("mistral-7b"))], 60.0, fp8=True)
    assert clock.skipped == []
    assert {(r["variant"], r["precision"], r["weights"]) for r in rows} == {
        ("frozen", "fp8", "bf16"),
        ("full", "fp8", "fp32"),
    }
    # two depths' difference on a shared CPU: noise can put a toy layer's forward at or above its forward and
    # backward (and below zero reads as zero), so only the fields are checked here; the GPU tests time them
    timed = ("fwd_ms_per_layer", "fwdbwd_ms_per_layer", "ckpt_ms_per_layer")
    assert all(isinstance(r[k], float) and r[k] >= 0 for r in rows for k in timed)
    doc = _doc(*rows)
    variants = {key[6] for key in from_document(doc, "probe rows").layers}
    assert variants == {"frozen" + FP8_ROW, "full" + FP8_ROW}


def test_the_probe_times_a_layer_with_adapters_added_before_float8():
    """The `adapters` hook (bench/scripts/lora_layer_gap.py times compiled LoRA layers through it) adds the adapters
    where train.py does, before float8 takes the layer: the frozen base Linears become float8, peft's rank-r adapters
    stay bf16 and are the only trained weights, at every depth timed."""
    pytest.importorskip("torchao.float8")
    pytest.importorskip("transformers")
    from peft import LoraConfig, get_peft_model
    from torchao.float8.float8_linear import Float8Linear

    from generator.probe.clock import Clock
    from generator.probe.compute_layers import DEPTHS, hf_config_dict, layer_seconds

    built = []

    def adapters(model):
        lora = LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
        built.append(get_peft_model(model, lora).base_model.model)
        return built[-1]

    clock = Clock.for_device("cpu")
    seconds, _ = layer_seconds(clock, hf_config_dict("mistral-7b"), "frozen", (1, 64), False, True, adapters=adapters)
    assert len(built) == len(DEPTHS) and len(seconds) == 3
    q = built[-1].get_decoder().layers[0].self_attn.q_proj
    assert isinstance(q.base_layer, Float8Linear) and not isinstance(q.lora_A["default"], Float8Linear)
    trained = {n for n, p in built[-1].named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n for n in trained)


def test_an_moe_is_not_timed_at_fp32_weights():
    """transformers runs fp32 experts in its fp32 loop, train.py casts them to bf16: the probe times neither, and says
    why, rather than write a row that prices train.py's float8 full fine-tune with the slow loop."""
    pytest.importorskip("transformers")
    pytest.importorskip("torchao.float8")
    from generator.probe.clock import Clock
    from generator.probe.compute_layers import hf_config_dict, layer_rows

    clock = Clock.for_device("cpu")
    rows = layer_rows(clock, [("mixtral-8x7b", hf_config_dict("mixtral-8x7b"))], 60.0, fp8=True)
    assert [r["variant"] for r in rows] == ["frozen"]
    assert any("fp32 weights: not timed" in s for s in clock.skipped)
