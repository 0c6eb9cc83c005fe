"""SDPA's math kernel, counted and priced (model.saved_count, estimate.attention, plan.model_reasons).

Falcon-7B's class in transformers 5.17 calls SDPA itself with its one key head against 71 query heads, without
enable_gqa and with a mask always built. No fused kernel takes differing head counts, so torch runs its math kernel,
which keeps every score in fp32: on one H100 (2026-12-05, bench/results/h100-x1-falcon-memory-2026-12-05.json) that
cell's LoRA at 2,048 x 2 ran out of memory past 81.9 GB allocated where the plan, counting the fused kernel, said 38.2.
transformers 5.25 repeats the key heads first, so the installed library decides which path a count sees; these tests
drive the count's SDPA stand-in directly on meta tensors, whatever transformers is installed."""

from __future__ import annotations

from dataclasses import replace

import pytest

from generator.estimate import Workload
from generator.estimate.activations import activation_terms
from generator.estimate.attention import kernel_path, mask_bytes
from generator.model import load_model
from generator.model.types import LayerSaved
from generator.plan.model_reasons import own_layer_reason

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def _saved_bytes(seq: int, kv_heads: int, enable_gqa: bool) -> tuple[int, list]:
    """Bytes autograd keeps for one SDPA call of 8 query heads over `kv_heads` key heads at `seq` tokens, run through
    the count's stand-in on meta, and what the stand-in reported for it."""
    from generator.model.count_attention import stand_ins

    calls: list = []
    q = torch.empty(1, 8, seq, 16, device="meta", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.empty(1, kv_heads, seq, 16, device="meta", dtype=torch.bfloat16, requires_grad=True) for _ in "kv")
    mask = torch.ones(1, 1, seq, seq, device="meta", dtype=torch.bool)
    kept: dict = {}

    def pack(t):
        kept[id(t.untyped_storage())] = t.untyped_storage().nbytes()
        return t

    with stand_ins(lambda *a: calls.append(a)), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=enable_gqa)
    return sum(kept.values()), calls


def test_fewer_key_heads_without_enable_gqa_take_the_math_kernel_and_keep_every_score():
    short, calls = _saved_bytes(128, kv_heads=1, enable_gqa=False)
    long, _ = _saved_bytes(256, kv_heads=1, enable_gqa=False)
    assert calls == [(8, True, True)]  # 8 query heads, masked, math
    assert long / short > 3.0  # the scores: four times the bytes at twice the tokens


def test_enable_gqa_or_equal_heads_keep_the_fused_kernels_count():
    for kv_heads, gqa in ((1, True), (8, False)):
        short, calls = _saved_bytes(128, kv_heads, gqa)
        long, _ = _saved_bytes(256, kv_heads, gqa)
        assert calls == [(8, True, False)]
        assert long / short == pytest.approx(2.0, rel=0.05)  # q, k, v and the output: linear in the tokens


def _falcon_math():
    """Falcon-7B's widths with the count transformers 5.17 gives its layer (sizing under that version: path
    sdpa_math, 4 bytes a score and head, 136,840 and 73,224 bytes a token trained and frozen)."""
    model = load_model("bench/models/falcon-default.json", compiled=False)
    counted = LayerSaved("sdpa_math", 136840.0, 73224.0, 4.0, 36368, 36368)
    return model, replace(model, layer_saved=counted)


def test_the_math_kernel_is_priced_as_eager_attention_with_its_own_score_bytes():
    fused, math = _falcon_math()
    work = Workload(seq_len=2048, micro_batch=2, method="lora", grad_checkpointing=False, load_dtype="bf16")
    assert kernel_path(math, work) == "eager"
    assert kernel_path(math, replace(work, attention="flex")) == "flex"
    _, per_layer = mask_bytes(math, work)
    assert per_layer == 4.0 * 2048**2 * 2 * math.num_heads
    dense = replace(fused, layer_saved=math.layer_saved._replace(path="sdpa_dense"))  # the same count, fused kernel
    fused_peak = activation_terms(dense, work, "ddp")
    math_peak = activation_terms(math, work, "ddp")
    more = sum(math_peak["backward_start"].values()) - sum(fused_peak["backward_start"].values())
    assert more > 0.9 * math.num_layers * per_layer  # every layer's scores alive at the start of backward


def test_the_plan_says_why_and_how_to_avoid_it():
    """flex where the class has it; Falcon's has none (transformers 5.25's Falcon repeats the key head instead)."""
    _, math = _falcon_math()
    work = Workload(seq_len=2048, micro_batch=2, method="lora")
    with_flex = own_layer_reason(replace(math, attentions=("sdpa", "flex", "eager")), work)
    without = own_layer_reason(replace(math, attentions=("sdpa", "eager")), work)
    assert any("math kernel" in line and "--attention flex" in line for line in with_flex)
    assert any("math kernel" in line and "newer transformers" in line for line in without)


def _table(*math_rows: dict):
    """The shipped H200 table with these SDPA math-kernel rows in place of its own (times made up for the test)."""
    import copy
    import json

    from generator.estimate.compute_source import SHIPPED
    from generator.estimate.compute_table import from_document

    doc = copy.deepcopy(json.loads(SHIPPED.read_text()))
    doc["attention"] = [*(r for r in doc["attention"] if r["path"] != "sdpa_math"), *math_rows]
    doc["measured"] = False  # read as given
    return from_document(doc, "test rows")


def _math_row(fwd_ms: float, fwdbwd_ms: float) -> dict:
    return {"path": "sdpa_math", "heads": 71, "kv_heads": 1, "head_dim": 64, "seq": 2048, "mb": 8, "doc": 2048,
            "keys_per_query": 2048.0, "fwd_ms": fwd_ms, "fwdbwd_ms": fwdbwd_ms}  # fmt: skip


def test_the_math_kernel_is_priced_from_its_own_rows_and_the_plan_says_so_without_them():
    from generator.estimate import Placement, estimate
    from generator.estimate.attention import rates_path
    from generator.estimate.attention_rates import attention_tflops, priced_path
    from generator.estimate.compute_time import compute_time

    fused, math = _falcon_math()
    work = Workload(seq_len=2048, micro_batch=2, method="lora", grad_checkpointing=False, load_dtype="bf16")
    assert rates_path(math, work) == "sdpa_math"
    assert rates_path(math, replace(work, attention="flex")) == "flex"
    assert rates_path(replace(fused, layer_saved=None), work) == "sdpa_causal"
    plain, timed = _table(), _table(_math_row(20.0, 60.0))
    dense = attention_tflops(plain, "sdpa_dense", 2048, 71, 1, 2048, 64)
    assert priced_path(plain, math, work) == ("sdpa_dense", "unmeasured")  # no rows: the fused kernel's rate
    assert priced_path(timed, math, work) == ("sdpa_math", None)
    # with the row: a quarter of its 8 sequences a layer, forward 20 ms and backward 40 each, over every layer
    flops = 4.0 * 2 * 2048 * 71 * 64 * 2048
    priced_dense = math.num_layers * flops * (1 / (dense[0] * 1e12) + 1 / (dense[1] * 1e12))
    more = compute_time(timed, math, work, "ddp").gpu_s - compute_time(plain, math, work, "ddp").gpu_s
    assert more == pytest.approx(math.num_layers * 0.25 * (0.020 + 0.040) - priced_dense, rel=1e-6)
    compiled = replace(work, compiled_layers=True)
    assert priced_path(timed, math, compiled)[1] == "compiled"  # inductor rewrites it: not the eager kernel
    assert compute_time(timed, math, compiled, "ddp").gpu_s == compute_time(plain, math, compiled, "ddp").gpu_s
    assert priced_path(plain, fused, work)[1] is None
    one = Placement(num_gpus_per_machine=1, gpu_name="NVIDIA H200", gpu_memory_gb=150.75, busbw_gbps=0)
    said = [n for n in estimate(math, compiled, one, "ddp").notes if "SDPA's math kernel" in n]
    assert len(said) == 1 and "at most as fast" in said[0] and "inductor" in said[0]
    assert not any("SDPA's math kernel" in n for n in estimate(math, work, one, "ddp").notes)  # the shipped rows'
    assert not any("SDPA's math kernel" in n for n in estimate(fused, work, one, "ddp").notes)


def test_the_probe_times_the_math_kernel_as_such_a_class_calls_it():
    """One key head broadcast over four query heads runs (the math kernel's broadcast); two key heads for four do not,
    and are skipped rather than timed on another kernel."""
    from generator.probe.clock import Clock
    from generator.probe.compute_attention import attention_rows

    clock = Clock.for_device("cpu")
    rows = attention_rows(clock, ["sdpa_math"], ((4, 1, 32), (4, 2, 32)), (128,), 256, 32, 30.0, doc=0)
    assert [(r["path"], r["heads"], r["kv_heads"], r["keys_per_query"]) for r in rows] == [("sdpa_math", 4, 1, 128.0)]
    assert rows[0]["fwd_ms"] > 0 and rows[0]["fwdbwd_ms"] > 0
    assert any("sdpa_math 4/2x32" in s for s in clock.skipped)
