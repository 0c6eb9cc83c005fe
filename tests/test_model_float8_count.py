"""What a compiled decoder layer with train.py's float8 Linears keeps (model.compiled_count, LayerSaved.compiled_fp8),
counted at sizing on one meta block, against the same layers run for real: a tiny model on the CPU with torchao's
Float8Linear (train.py's filter), each layer past the first through dynamo and AOTAutograd with inductor's
decompositions and partitioner (bench/scripts/saved_audit.compile_blocks), its saved tensors counted at two lengths so
that what grows with the tokens is compared (float8's cast weights do not). On one H200 the float8 layers of Phi kept
about 30 KB a token and layer less than the compiled bf16 count priced (h200-x1-families-layernorm-2026-12-05.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("torchao.float8")

from bench.scripts.saved_audit import DROPOUT_KEYS, FAMILIES, WIDTHS, compile_blocks, saved_bytes_per_layer  # noqa: E402

LAYERS, CHECKED, LENGTHS = 3, slice(1, 2), (128, 256)


def _config(model_type: str):
    from transformers import AutoConfig

    config = AutoConfig.for_model(model_type, **{**WIDTHS, "num_hidden_layers": LAYERS}, **FAMILIES[model_type])
    for key in DROPOUT_KEYS:
        if isinstance(getattr(config, key, None), float):
            setattr(config, key, 0.0)
    return config


def _real_per_token(config, trained: bool) -> float:
    """Bytes per token a checked layer keeps, run for real: the slope between LENGTHS of their mean."""
    from torchao.float8 import convert_to_float8_training
    from torchao.float8.float8_linear import Float8Linear
    from transformers import AutoModelForCausalLM

    from training.precision import fp8_filter

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").to(torch.bfloat16).train()
    model.requires_grad_(trained)
    model.get_input_embeddings().requires_grad_(True)  # frozen layers still pass the input's gradient back
    convert_to_float8_training(model, module_filter_fn=fp8_filter)
    for (
        m
    ) in model.modules():  # torchao casts a Linear's input to autocast's dtype on a GPU (the CPU has no CUDA autocast)
        if isinstance(m, Float8Linear):
            m.register_forward_pre_hook(lambda m, a: (a[0].to(torch.bfloat16), *a[1:]))
    compile_blocks(model.get_decoder().layers[CHECKED])
    counts = []
    for seq in LENGTHS:
        ids = torch.randint(0, WIDTHS["vocab_size"], (1, seq))
        kept = saved_bytes_per_layer(model, {"input_ids": ids, "labels": ids}, LAYERS)[CHECKED]
        counts.append(sum(kept) / len(kept))
    return (counts[1] - counts[0]) / (LENGTHS[1] - LENGTHS[0])


def _phi_sized(tmp_path: Path):
    """Phi's config and its count (sized on the meta device; a llama-family config is sized in closed form, without
    a count)."""
    from generator.model import load_model

    config = _config("phi")
    (tmp_path / "config.json").write_text(json.dumps({**config.to_dict(), "model_type": "phi"}, default=str))
    return config, load_model(str(tmp_path)).layer_saved


# Trained and frozen are two tests so the suite's two workers compile them side by side (each ~65 s on one core).
def test_a_float8_layer_keeps_what_its_count_says(tmp_path: Path):
    """Phi runs attention and MLP side by side on one LayerNorm output, so sizing also finds q, k, v and fc1 handed
    one tensor, which peft's adapters on them, compiled, keep once (estimate.lora_saved.lora_saved_delta_per_token)."""
    config, saved = _phi_sized(tmp_path)
    real = _real_per_token(config, trained=True)
    assert saved.compiled_fp8 == pytest.approx(real, rel=0.03), (saved, real)
    assert saved.compiled_fp8 < 0.9 * saved.compiled  # the inputs kept cast: what the bf16 count would over-price
    assert saved.shared_inputs == (("mlp.fc1", "self_attn.k_proj", "self_attn.q_proj", "self_attn.v_proj"),)


def test_a_frozen_float8_layer_keeps_what_its_count_says(tmp_path: Path):
    config, saved = _phi_sized(tmp_path)
    assert _real_per_token(config, trained=False) == pytest.approx(saved.compiled_frozen, rel=0.03)


def test_the_probe_converts_what_train_py_converts_under_lora():
    """The probe's float8 conversion (model.compiled_count.to_float8, which the estimator's package uses because it
    does not import training/) takes the same Linears as train.py's filter on a LoRA model: the frozen base Linears,
    never peft's rank-r adapters, whose widths (rank 16) are float8-aligned too."""
    from peft import LoraConfig, get_peft_model
    from torchao.float8.float8_linear import Float8Linear
    from transformers import AutoModelForCausalLM

    from generator.model.compiled_count import to_float8
    from training.precision import fp8_filter

    def lora_model():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(_config("llama"), attn_implementation="sdpa")
        lora = LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "v_proj", "down_proj"], task_type="CAUSAL_LM")
        return get_peft_model(model, lora).base_model.model

    probe, trained = lora_model(), lora_model()
    to_float8(probe.get_decoder())
    from torchao.float8 import convert_to_float8_training

    convert_to_float8_training(trained, module_filter_fn=fp8_filter)

    def converted(module) -> set[str]:
        return {name for name, m in module.named_modules() if isinstance(m, Float8Linear)}

    expected = {name.removeprefix("model.") for name in converted(trained)}
    assert any(".base_layer" in name for name in expected)
    assert not any("lora_" in name for name in expected)
    assert converted(probe.get_decoder()) == expected
