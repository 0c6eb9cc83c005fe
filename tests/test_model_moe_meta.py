"""An MoE the closed-form counter does not know (issue 26: any MoE the installed transformers builds), sized by
meta-device counting: every parameter for memory, only the routed experts for compute."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from generator.estimate import Placement, Workload, estimate  # noqa: E402
from generator.model import load_model  # noqa: E402

QWEN3_MOE = {
    "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 256,
    "intermediate_size": 768, "moe_intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 64, "num_experts": 16, "num_experts_per_tok": 4, "vocab_size": 1000,
    "max_position_embeddings": 512, "tie_word_embeddings": False,
}  # fmt: skip


def _spec(tmp_path, config):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return load_model(str(path), compiled=False)


def test_routed_experts_only_count_as_active_matmuls(tmp_path):
    moe = _spec(tmp_path, QWEN3_MOE)
    assert (moe.num_experts, moe.experts_per_token, moe.intermediate_size) == (16, 4, 128)
    one_expert = 3 * 256 * 128  # gate, up and down of one expert
    every_expert = 3 * 16 * one_expert
    dense_matmuls = moe.params_total - 1000 * 256 - every_expert  # attention, router, norms and lm_head
    assert moe.matmul_params_active == dense_matmuls + 3 * 4 * one_expert


def test_a_dense_model_by_meta_has_no_experts(tmp_path):
    dense = _spec(tmp_path, {**QWEN3_MOE, "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]})
    assert dense.num_experts == 0 and dense.matmul_params_active == dense.params_total - 1000 * 256


def test_moe_memory_counts_every_expert_and_the_routed_activations(tmp_path):
    moe = _spec(tmp_path, QWEN3_MOE)
    one = Placement(num_gpus_per_machine=1, gpu_name="NVIDIA H200", gpu_memory_gb=150.75, busbw_gbps=0.0)
    small, large = (estimate(moe, Workload(seq_len=s, grad_checkpointing=False), one, "ddp") for s in (128, 256))
    assert small.breakdown["weights"] == pytest.approx(4 * moe.params_total / 1e9, abs=1e-3)  # fp32 load, all experts
    assert large.breakdown["activations"] > small.breakdown["activations"] > 0
