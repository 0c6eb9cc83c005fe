"""LoRA on a mixture of experts with train.py's default targets: the adapters the estimate prices (their GEMMs, peft's
passes, their states) are the ones peft trains. peft 0.21 matches gate_proj, up_proj and down_proj on every Linear so
named unless it moves them onto fused experts (train.py then leaves them out), so Qwen1.5-MoE's shared expert takes
three adapters a layer beside the attention's four; priced without them, its LoRA steps read 12-16% fast on one H200
(bench/README, twenty-seventh session)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from bench.scripts.saved_audit import FAMILIES, WIDTHS  # noqa: E402

MOE = ("mixtral", "qwen3_moe", "olmoe", "qwen2_moe")  # Qwen2-MoE: a shared expert beside the routed ones


@pytest.mark.parametrize("model_type", MOE)
def test_default_targets_price_the_adapters_peft_trains(tmp_path: Path, model_type):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    from generator.estimate.states import LORA_TARGETS, lora_params
    from generator.model import load_model
    from training.args import DEFAULT_LORA_TARGETS
    from training.model import experts_kept_off, linear_targets

    config = AutoConfig.for_model(model_type, **WIDTHS, **FAMILIES[model_type])
    (tmp_path / "config.json").write_text(json.dumps({**config.to_dict(), "model_type": model_type}, default=str))
    spec = load_model(str(tmp_path), compiled=False)
    model = AutoModelForCausalLM.from_config(config)
    targets, _ = experts_kept_off(model, linear_targets(model, DEFAULT_LORA_TARGETS.split(",")))
    model = get_peft_model(model, LoraConfig(r=8, target_modules=targets, task_type="CAUSAL_LM"))
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert lora_params(spec, 8, LORA_TARGETS) == trained
