"""Mixtures of experts whose llama MLP names peft does not adapt as Linears (issue 26).

transformers v5 fused each MoE layer's routed experts into stacked parameters (gate_up_proj, down_proj), and peft 0.21
keeps LoRA configs written for v4 working by moving the names gate_proj, up_proj and down_proj off the target modules
and onto those parameters (peft/utils/transformers_weight_conversion.py, _convert_peft_config_moe), for every model type
transformers' conversion table maps to qwen2_moe's pattern (transformers/conversion_mapping.py). Asked for the llama
names, peft then trains an adapter on every routed expert (a weight-sized delta built each forward, a weight gradient
for every expert) and none on the shared experts or dense MLPs that hold those names as Linears. Checked on
transformers 5.25 and peft 0.21.2 with train.py's default targets on each type's default config: afmoe, beam,
DeepSeek-V2/V3/V3.2, ERNIE-4.5-MoE, EXAONE-MoE, GLM-4.5 (and its lite and DSA variants), LongCat-Flash, Qwen3-Next,
Sarvam-MLA and Solar-Open lose their MLP adapters to the experts this way; Qwen1.5-MoE (qwen2_moe itself) and Mixtral
(its own pattern, other names) are not moved.

train.py therefore leaves those names out on such a model unless --lora-targets names them (training/model.py
experts_kept_off, which asks the installed peft and falls back on this table), and the estimate prices no adapter on
their shared experts (estimate.lora_saved.lora_saved_delta_per_token). Planning imports no peft, hence the table."""

from __future__ import annotations

FUSED_EXPERT_TYPES = frozenset({
    "afmoe", "beam", "cohere2_moe", "deepseek_v2", "deepseek_v3", "deepseek_v32", "dots1", "ernie4_5_moe",
    "exaone_moe", "flex_olmo", "glm4_moe", "glm4_moe_lite", "glm4v_moe", "glm_moe_dsa", "hunyuan_v1_moe",
    "longcat_flash", "mellum", "olmoe", "qwen3_moe", "qwen3_next", "qwen3_omni_moe", "qwen3_omni_moe_text",
    "qwen3_omni_moe_thinker", "sarvam_mla", "solar_open",
})  # fmt: skip
"""The model types transformers 5.25 maps to qwen2_moe's conversion pattern (tests/test_catalog_peft_moe.py reads the
installed table); those without a Linear of the llama MLP names (Qwen3-MoE, OLMoE) are listed too: nothing of theirs
is moved."""
MOVED_NAMES = ("gate", "up", "down")
"""The llama targets peft moves onto the experts (estimate.scripts short names)."""


def mlp_names_reach_linears(model_type: str) -> bool:
    """Whether LoRA's gate/up/down_proj targets adapt this model's Linears of those names (its shared experts or
    dense MLPs), rather than being moved onto its fused routed experts."""
    return model_type not in FUSED_EXPERT_TYPES
