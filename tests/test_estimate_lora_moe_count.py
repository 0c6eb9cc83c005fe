"""The estimate's LoRA parameter count on a mixture of experts is what train.py's default targets build with the
installed peft: the attention projections the model really has, at their own widths (DeepSeek's MLA has q_proj or
q_a/q_b_proj and an o_proj reading heads x v_head_dim, no k_proj or v_proj: the llama widths had priced 3.5x what
peft builds), and the MLP names only where they reach Linears rather than the fused routed experts."""

from __future__ import annotations

import pytest

from tests.test_catalog_peft_moe import DEEPSEEK, QWEN2_MOE, TINY_MOE, _model, _train_py_adapters

RANK = 4  # _train_py_adapters' --lora-r


@pytest.mark.parametrize(
    ("model_type", "extra"),
    [
        ("deepseek_v3", DEEPSEEK),
        ("deepseek_v3", {**DEEPSEEK, "q_lora_rank": 32}),
        ("qwen2_moe", QWEN2_MOE),
        ("olmoe", dict(num_experts=4, num_experts_per_tok=2)),
        ("mixtral", dict(num_local_experts=4, num_experts_per_tok=2)),
    ],
    ids=["deepseek-mla", "deepseek-mla-q-lora", "qwen2-moe", "olmoe", "mixtral"],
)
def test_the_estimate_counts_the_adapters_train_py_builds(model_type, extra):
    from generator.estimate.lora_targets import lora_params
    from generator.estimate.types import Workload
    from generator.model.loading import spec_from_any_config

    config, model = _model(model_type, extra)
    peft_model, _, _ = _train_py_adapters(model)
    built = sum(p.numel() for n, p in peft_model.named_parameters() if ".lora_" in n)
    spec = spec_from_any_config({**config.to_dict(), **TINY_MOE}, "tiny")
    assert built > 0 and lora_params(spec, RANK, Workload(method="lora").lora_targets) == built
