"""LoRA on an architecture beyond the llama names: train.py passes `--lora-targets all-linear` there and peft adapts
every Linear of the decoder blocks (one fused qkv_proj, no gate where the MLP has none). The estimate prices those
adapters (estimate.states.own_linears_adapted), not the llama family's seven: what a tiny model of each family keeps
under peft on the CPU, and peft's own count of trainable parameters. Priced by the llama names, the fused-qkv
families read 11-21% over what they keep and the GELU-MLP ones 4-6% (bench/scripts/saved_audit.py --method lora)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from bench.scripts.saved_audit import FAMILIES, WIDTHS, count_one  # noqa: E402

FAMILIES_OWN = ["phi3", "gpt_neox", "gpt2", "starcoder2", "gpt_bigcode", "bloom", "qwen3"]


@pytest.mark.parametrize("model_type", [*FAMILIES_OWN, "qwen3_moe", "gpt_oss", "qwen2_moe"])  # MoEs: by name
def test_a_lora_layer_keeps_what_it_is_priced_at(tmp_path: Path, model_type):
    row = count_one(model_type, FAMILIES[model_type], tmp_path, method="lora")
    assert 0.99 <= row["priced_over_counted"] <= 1.01, row


@pytest.mark.parametrize("model_type", FAMILIES_OWN)
def test_adapter_parameters_are_what_peft_trains(tmp_path: Path, model_type):
    import json

    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    from generator.estimate.scripts import ALL_LINEAR
    from generator.estimate.states import lora_params, own_linears_adapted
    from generator.model import load_model

    config = AutoConfig.for_model(model_type, **WIDTHS, **FAMILIES[model_type])
    (tmp_path / "config.json").write_text(json.dumps({**config.to_dict(), "model_type": model_type}, default=str))
    spec = load_model(str(tmp_path), compiled=False)
    model = get_peft_model(
        AutoModelForCausalLM.from_config(config),
        LoraConfig(r=8, target_modules="all-linear", task_type="CAUSAL_LM"),
    )
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert lora_params(spec, 8, ALL_LINEAR) == trained
    assert own_linears_adapted(spec) == (model_type != "qwen3")  # Qwen3 has the seven names
