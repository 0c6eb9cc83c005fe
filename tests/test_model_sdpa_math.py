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
    from generator.model.saved_count import _stand_ins

    calls: list = []
    q = torch.empty(1, 8, seq, 16, device="meta", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.empty(1, kv_heads, seq, 16, device="meta", dtype=torch.bfloat16, requires_grad=True) for _ in "kv")
    mask = torch.ones(1, 1, seq, seq, device="meta", dtype=torch.bool)
    kept: dict = {}

    def pack(t):
        kept[id(t.untyped_storage())] = t.untyped_storage().nbytes()
        return t

    with _stand_ins(lambda *a: calls.append(a)), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
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
    assert any("at most" in line for line in without)  # the speed priced as the fused kernel's is an upper bound
