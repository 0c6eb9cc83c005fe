"""peft 0.21 moves the llama MLP names onto the fused routed experts of the MoE types transformers maps to qwen2_moe's
weight conversion (generator/catalog/peft_moe.py): train.py leaves them out there and says so, the plan's TRL line
names the attention projections instead of all-linear, and the estimate prices no shared-expert adapter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from generator.catalog.peft_moe import FUSED_EXPERT_TYPES, mlp_names_reach_linears

TINY_MOE = dict(vocab_size=512, hidden_size=128, intermediate_size=256, moe_intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)  # fmt: skip
DEEPSEEK = dict(n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, n_group=1, topk_group=1,
                first_k_dense_replace=1, q_lora_rank=None, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=16,
                v_head_dim=32)  # fmt: skip
QWEN2_MOE = dict(num_experts=4, num_experts_per_tok=2, shared_expert_intermediate_size=256)
DEFAULT = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def test_every_listed_type_is_one_transformers_converts_like_qwen2_moe():
    mapping = pytest.importorskip("transformers.conversion_mapping")
    table = getattr(mapping, "_MODEL_TO_CONVERSION_PATTERN", None)
    if table is None:
        pytest.skip("this transformers has no weight conversion table")
    known = [t for t in FUSED_EXPERT_TYPES if t in table]
    assert known, "none of the listed types is in the installed transformers' table"
    assert all(table[t] == "qwen2_moe" for t in known)
    assert mlp_names_reach_linears("qwen2_moe") and mlp_names_reach_linears("mixtral")


def _model(model_type: str, extra: dict):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("peft")
    config = transformers.AutoConfig.for_model(model_type, **TINY_MOE, **extra)
    torch.manual_seed(0)
    return config, transformers.AutoModelForCausalLM.from_config(config)


def test_train_py_keeps_deepseeks_adapters_off_its_experts_and_says_so():
    from peft import LoraConfig, get_peft_model

    from training.model import experts_kept_off, linear_targets

    _, model = _model("deepseek_v3", DEEPSEEK)
    targets, note = experts_kept_off(model, linear_targets(model, DEFAULT))
    assert not {"gate_proj", "up_proj", "down_proj"} & set(targets) and "o_proj" in targets
    assert "fused routed experts" in note and "deepseek_v3" in note
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=targets))
    adapted = {n.split(".lora_")[0] for n, _ in peft_model.named_parameters() if ".lora_" in n}
    assert adapted and not any("experts" in n or "mlp" in n for n in adapted)
    assert not peft_model.peft_config["default"].target_parameters


def test_a_type_peft_does_not_convert_keeps_its_shared_experts_adapters(monkeypatch):
    from training.model import experts_kept_off, linear_targets

    _, model = _model("qwen2_moe", QWEN2_MOE)
    targets = linear_targets(model, DEFAULT)
    assert experts_kept_off(model, targets) == (targets, None)
    # without peft's conversion to ask, the catalog's table decides (qwen2_moe: nothing moves)
    import peft.utils.transformers_weight_conversion as conversion

    monkeypatch.delattr(conversion, "convert_peft_config_for_transformers")
    assert experts_kept_off(model, targets) == (targets, None)


def test_the_estimate_and_the_trl_line_follow_the_same_rule(tmp_path: Path):
    pytest.importorskip("transformers")
    from dataclasses import replace

    from generator.emit.script_cli import _targets
    from generator.estimate.lora_saved import lora_saved_delta_per_token
    from generator.estimate.scripts import ALL_LINEAR
    from generator.model import load_model

    config, _ = _model("qwen2_moe", QWEN2_MOE)
    (tmp_path / "config.json").write_text(json.dumps({**config.to_dict(), "model_type": "qwen2_moe"}))
    qwen = load_model(str(tmp_path), compiled=False)
    fused = replace(qwen, model_type="qwen3_next")  # the same layer, as a type whose MLP names peft moves
    shared_adapters = lora_saved_delta_per_token(qwen, 2, 16) - lora_saved_delta_per_token(fused, 2, 16)
    # gate and up each keep a bf16 copy of the norm's output, down one of the shared expert's product, each lora_B
    # its lora_A's output
    assert shared_adapters == 2 * (2 * qwen.hidden_size + 256) + 3 * 2 * 16
    assert _targets(qwen, ALL_LINEAR) == DEFAULT
    assert _targets(fused, ALL_LINEAR) == DEFAULT[:4]
