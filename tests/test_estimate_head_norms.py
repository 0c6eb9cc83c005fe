"""q_norm and k_norm (Qwen3, OLMo-2, Gemma-3) against what autograd really saves: a tiny Qwen3 on CPU under bf16
autocast, counted as tests/test_estimate_lora_saved.py counts Mistral. Qwen3-8B LoRA at 4,096 x 2 on one H200 read
-6.1% allocated before these norms were counted (bench/results/h200-x1-families-unseen-picks-2026-12-04.json); the
term comes from RMSNorm's source and this count, not from that row."""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from generator.estimate import Workload  # noqa: E402
from generator.estimate.activations import activation_terms  # noqa: E402
from generator.model import spec_from_any_config  # noqa: E402
from tests.test_estimate_lora_saved import LAYERS, SEQ, TARGETS, TINY, plain_loop_inputs, saved_bytes_per_layer  # noqa: E402


def tiny_qwen3(method: str):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(**TINY, intermediate_size=896, head_dim=32)
    model = Qwen3ForCausalLM._from_config(cfg, attn_implementation="sdpa").to(torch.bfloat16)
    if method == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=TARGETS, task_type="CAUSAL_LM"))
    model.train()
    return model, spec_from_any_config({**cfg.to_dict(), "model_type": "qwen3"}, "tiny-qwen3", compiled=False)


@pytest.mark.parametrize("method", ["lora", "full"])
def test_head_norms_are_counted_as_autograd_saves_them(method):
    model, spec = tiny_qwen3(method)
    assert spec.qk_norm  # read from the built model's modules (ModelSpec.qk_norm)
    inputs, _ = plain_loop_inputs()
    counted = saved_bytes_per_layer(model, inputs)
    workload = Workload(method=method, seq_len=SEQ, grad_checkpointing=False, load_dtype="bf16", lora_r=16)
    fwd = activation_terms(spec, workload, "ddp")["forward_end"]
    predicted = (fwd["activations"] + fwd["attention_bias"]) / LAYERS
    # the formula without the head norms (and without the layer's own count, which has them)
    without = activation_terms(replace(spec, qk_norm=False, layer_saved=None), workload, "ddp")["forward_end"]
    unnormed = (without["activations"] + without["attention_bias"]) / LAYERS
    for layer in counted[1:]:  # layer 0 also holds the rotary cos/sin every layer shares
        assert predicted == pytest.approx(layer, rel=0.01)
        assert abs(unnormed - layer) > 0.03 * layer  # the norms' share is more than the tolerance: the test can fail
