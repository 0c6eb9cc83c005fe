"""The closed-form counter against meta-device instantiation of the real transformers classes."""

import pytest

from generator.model import count_params_meta, load_model, spec_from_config
from generator.model.presets import preset_config

pytest.importorskip("transformers")


def _small(name: str, **overrides) -> dict:
    """A preset shrunk in width/depth (same structure) so instantiation stays cheap."""
    cfg = preset_config(name)
    cfg.update(hidden_size=256, intermediate_size=704, num_hidden_layers=3, num_attention_heads=8, vocab_size=1000)
    cfg["head_dim"] = 32
    cfg["num_key_value_heads"] = min(cfg["num_key_value_heads"], 8) // (4 if cfg["num_key_value_heads"] < 32 else 1)
    cfg.update(overrides)
    return cfg


CASES = {
    "mistral-gqa": _small("mistral-7b"),
    "llama2-mha": _small("llama-2-7b", num_key_value_heads=8),
    "llama3-tied": _small("llama-3-8b", tie_word_embeddings=True),
    "llama-biases": _small("llama-2-7b", attention_bias=True, mlp_bias=True),
    "qwen2-qkv-bias": _small("qwen2.5-7b"),
    "mixtral-moe": _small("mixtral-8x7b"),
    "head-dim-not-h-over-heads": _small("mistral-7b", head_dim=48),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_closed_form_matches_meta(case):
    cfg = CASES[case]
    assert spec_from_config(cfg, case).params_total == count_params_meta(cfg)


def test_full_mistral_on_meta():
    assert count_params_meta(preset_config("mistral-7b")) == 7_241_732_096


def test_unknown_architecture_falls_back_to_meta(tmp_path):
    import json

    cfg = {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "n_embd": 64,
        "n_layer": 2,
        "n_head": 4,
        "vocab_size": 500,
        "n_positions": 128,
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = load_model(str(tmp_path), compiled=False)
    assert m.params_total == count_params_meta(cfg)
    assert m.num_layers == 2 and m.hidden_size == 64
