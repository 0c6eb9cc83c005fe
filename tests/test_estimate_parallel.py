"""The tensor/context-parallel estimator terms (generator.estimate.parallel), each against its formula. All of these
are predictions: nothing here was measured on GPUs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from generator.estimate import estimate
from generator.estimate.parallel import (
    Layout,
    cp_buffer_bytes,
    cp_bus_bytes,
    estimate_layout,
    tp_bus_bytes,
    tp_shard_model,
    ulysses_bus_bytes,
)
from generator.estimate.types import Placement, Workload
from generator.model import load_model

M = load_model("llama-3.1-8b")
H200 = Placement(8, "NVIDIA H200", 150.75, 339.0)


def _lay(**kw) -> Layout:
    return Layout(**{"tp_busbw_gbps": 339.0, "cp_busbw_gbps": 339.0, "fsdp_busbw_gbps": 339.0, **kw})


def test_a_tp_rank_holds_a_tp_th_of_the_decoder_and_lm_head_and_all_the_embeddings():
    s = tp_shard_model(M, 4)
    assert (s.num_heads, s.num_kv_heads, s.intermediate_size) == (8, 2, 3584)
    lm_head = M.vocab_size * M.hidden_size
    layers = M.num_layers * M.params_per_layer
    expected = (M.params_total - layers - lm_head) + layers / 4 + lm_head / 4
    assert s.params_total == pytest.approx(expected, rel=1e-6)
    assert s.vocab_size == M.vocab_size and s.hidden_size == M.hidden_size  # logits gathered, norms whole
    assert tp_shard_model(M, 1) is M


def test_tp_traffic_is_megatrons_two_all_reduces_each_way_per_layer_plus_the_logits_gather():
    w = Workload(seq_len=8192, micro_batch=1, grad_checkpointing=False, grad_accum=2)
    act = 2 * 8192 * M.hidden_size
    ring = 2 * 3 / 4
    per_layer = 4 * act * ring
    head = 2 * 8192 * M.vocab_size * 3 / 4 + act * ring
    assert tp_bus_bytes(M, w, _lay(tp=4, dp_shard=2)) == pytest.approx(2 * (M.num_layers * per_layer + head))
    # a recomputed forward all-reduces twice more per layer
    ckpt = tp_bus_bytes(M, replace(w, grad_checkpointing=True), _lay(tp=4, dp_shard=2))
    assert ckpt - tp_bus_bytes(M, w, _lay(tp=4, dp_shard=2)) == pytest.approx(2 * M.num_layers * 2 * act * ring)


def test_cp_traffic_gathers_keys_and_values_per_layer_and_pass():
    w = Workload(seq_len=131072, micro_batch=1, grad_checkpointing=True)
    kv = 2 * 2 * 131072 * M.num_kv_heads * M.head_dim
    assert cp_bus_bytes(M, w, _lay(cp=8)) == pytest.approx(M.num_layers * 4 * kv * 7 / 8)  # 2 fwd + 2 bwd
    assert cp_buffer_bytes(M, w, _lay(cp=8)) == pytest.approx(kv * 3)  # bf16 K/V + their fp32 gradients
    assert cp_bus_bytes(M, w, _lay(tp=2, cp=4)) == pytest.approx(M.num_layers * 4 * kv / 2 * 3 / 4)


def test_ulysses_moves_q_k_v_and_the_output_with_all_to_alls():
    w = Workload(seq_len=65536, grad_checkpointing=False)
    q, kv = M.num_heads * M.head_dim, M.num_kv_heads * M.head_dim
    per_pass = 2 * 65536 / 8 * (2 * q + 2 * kv) * 7 / 8
    assert ulysses_bus_bytes(M, w, 8) == pytest.approx(M.num_layers * per_pass * 2)
    assert ulysses_bus_bytes(M, w, 1) == 0


def test_cp_splits_the_activations_and_keeps_the_attention_work():
    w = Workload(method="lora", load_dtype="bf16", seq_len=65536, grad_checkpointing=True, attention="sdpa")
    plain = estimate(M, w, H200, "fsdp")
    cp = estimate_layout(M, w, H200, _lay(cp=8))
    assert not plain.fits and cp.fits
    assert cp.breakdown["checkpoints"] == pytest.approx(plain.breakdown["checkpoints"] / 8, rel=1e-6)
    assert "cp_kv_buffers" in cp.breakdown
    local = estimate(M, replace(w, seq_len=65536 // 8), H200, "fsdp")
    assert cp.compute_s > local.compute_s  # the queries still meet every earlier key: attention not cut by cp
    assert cp.tokens_per_s_per_gpu * cp.step_s == pytest.approx(65536 / 8)


def test_a_group_on_a_slow_link_costs_time_not_memory():
    w = Workload(seq_len=8192, grad_checkpointing=True)
    fast = estimate_layout(M, w, H200, _lay(tp=4, dp_shard=2))
    slow = estimate_layout(M, w, H200, _lay(tp=4, dp_shard=2, tp_busbw_gbps=35.0))
    assert slow.reserved_gb == fast.reserved_gb and slow.step_s > fast.step_s
    assert any("predicted, not measured" in n for n in fast.notes)
