"""peft turns the llama MLP names into adapters on the fused routed experts of an MoE (0.21 moving them there off the
Linears, 0.22 adding the experts beside the Linears: generator/catalog/peft_moe.py): train.py's default never adapts
the routed experts and builds the same adapters under either, the plan's TRL line names the attention projections
instead of all-linear where the names are left out, and the estimate prices no shared-expert adapter there."""

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


def _train_py_adapters(model):
    """The peft model train.py's default --lora-targets builds on `model` (training/model.py add_adapters), its note,
    and the names of the modules holding an adapter."""
    from training.args import parse_args
    from training.model import add_adapters

    peft_model, note = add_adapters(model, parse_args(["--method", "lora", "--lora-r", "4"]), grad_checkpointing=False)
    adapted = {n.split(".lora_")[0] for n, _ in peft_model.named_parameters() if ".lora_" in n}
    return peft_model, note, adapted


@pytest.mark.parametrize("model_type, extra", [("deepseek_v3", DEEPSEEK), ("qwen2_moe", QWEN2_MOE)])
def test_train_py_s_default_targets_never_adapt_the_routed_experts(model_type, extra):
    """Under peft 0.22 a bare gate_proj also adds the routed experts as target_parameters (an adapter per expert,
    which the plan does not price): none may reach them, and none is a parameter target."""
    _, model = _model(model_type, extra)
    peft_model, _, adapted = _train_py_adapters(model)
    assert adapted and not any(".mlp.experts" in n for n in adapted), sorted(adapted)
    assert not peft_model.peft_config["default"].target_parameters


def test_train_py_keeps_deepseeks_adapters_off_its_mlps_and_says_so():
    from training.model import experts_kept_off, linear_targets

    _, model = _model("deepseek_v3", DEEPSEEK)
    targets, note = experts_kept_off(model, linear_targets(model, DEFAULT))
    assert targets == ["q_proj", "o_proj"]
    assert "fused routed experts" in note and "deepseek_v3" in note
    # peft 0.21 would have moved the MLP names off the shared experts and dense MLP; 0.22 would keep them there:
    # train.py adapts neither, as the estimate prices it (catalog.peft_moe.mlp_names_reach_linears)
    _, note, adapted = _train_py_adapters(model)
    assert "fused routed experts" in note
    assert {n.rsplit(".", 1)[-1] for n in adapted} == {"q_proj", "o_proj"}


def test_a_type_peft_0_21_does_not_convert_keeps_its_shared_experts_adapters(monkeypatch):
    import peft.utils.transformers_weight_conversion as conversion

    from training.model import experts_kept_off, linear_targets

    _, model = _model("qwen2_moe", QWEN2_MOE)
    targets = linear_targets(model, DEFAULT)
    named = [*DEFAULT[:4], "shared_expert.gate_proj", "shared_expert.up_proj", "shared_expert.down_proj"]
    assert experts_kept_off(model, targets) == (named, None)
    with monkeypatch.context() as patched:  # without peft's conversion to ask (before 0.21) the table decides alone
        patched.delattr(conversion, "convert_peft_config_for_transformers")
        assert experts_kept_off(model, targets) == (named, None)
    _, note, adapted = _train_py_adapters(model)
    in_layer = {n.split(".layers.", 1)[1].split(".", 1)[1] for n in adapted}  # the name within its decoder layer
    assert note is None and in_layer == {*(f"self_attn.{t}" for t in DEFAULT[:4]), *(f"mlp.{t}" for t in named[4:])}


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
