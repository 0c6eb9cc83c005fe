"""LoRA on an architecture beyond the llama names: train.py passes `--lora-targets all-linear` there and peft adapts
every Linear of the decoder blocks (one fused qkv_proj, no gate where the MLP has none). The estimate prices those
adapters (estimate.lora_targets.own_linears_adapted), not the llama family's seven: what a tiny model of each family
keeps under peft on the CPU, and peft's own count of trainable parameters. Priced by the llama names, the fused-qkv
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


def _spec_and_trained(tmp_path: Path, model_type: str, targets):
    """The planner's spec of a tiny `model_type` and the parameters peft trains on it at rank 8 with `targets`
    (peft's spelling, or a callable giving them from the built model)."""
    import json

    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    from generator.model import load_model

    config = AutoConfig.for_model(model_type, **WIDTHS, **FAMILIES[model_type])
    (tmp_path / "config.json").write_text(json.dumps({**config.to_dict(), "model_type": model_type}, default=str))
    spec = load_model(str(tmp_path), compiled=False)
    model = AutoModelForCausalLM.from_config(config)
    targets = targets(model) if callable(targets) else targets
    model = get_peft_model(model, LoraConfig(r=8, target_modules=targets, task_type="CAUSAL_LM"))
    return spec, sum(p.numel() for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("model_type", FAMILIES_OWN)
def test_adapter_parameters_are_what_peft_trains(tmp_path: Path, model_type):
    from generator.estimate.lora_targets import lora_params, own_linears_adapted
    from generator.estimate.scripts import ALL_LINEAR

    spec, trained = _spec_and_trained(tmp_path, model_type, "all-linear")
    assert lora_params(spec, 8, ALL_LINEAR) == trained
    assert own_linears_adapted(spec) == (model_type != "qwen3")  # Qwen3 has the seven names


@pytest.mark.parametrize("model_type", ["mixtral", "qwen3_moe", "olmoe", "qwen2_moe"])
def test_an_moe_s_default_targets_price_the_adapters_peft_trains(tmp_path: Path, model_type):
    """train.py's default targets on a mixture of experts: gate_proj, up_proj and down_proj on every Linear so named,
    named by parent so that no peft adapts the fused routed experts through them, unless peft 0.21 moves them onto
    those experts (train.py then leaves them out: catalog.peft_moe), so Qwen2-MoE's shared expert takes three adapters a
    layer beside the attention's four (estimate.lora_targets.moe_mlp_linears_adapted) under peft 0.21 and 0.22; priced
    without them, Qwen1.5-MoE's LoRA steps read 12-16% fast on one H200 (bench/README, twenty-seventh session)."""
    from generator.estimate.lora_targets import LORA_TARGETS, lora_params
    from training.args import DEFAULT_LORA_TARGETS
    from training.model import experts_kept_off, linear_targets

    def default_targets(model):
        return experts_kept_off(model, linear_targets(model, DEFAULT_LORA_TARGETS.split(",")))[0]

    spec, trained = _spec_and_trained(tmp_path, model_type, default_targets)
    assert lora_params(spec, 8, LORA_TARGETS) == trained
