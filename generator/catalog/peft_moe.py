"""Mixtures of experts whose llama MLP names would adapt their fused routed experts through peft (issue 26).

transformers v5 fused each MoE layer's routed experts into stacked parameters (gate_up_proj, down_proj), and peft keeps
LoRA configs written for v4 working by turning the targets gate_proj, up_proj and down_proj into `target_parameters`
on those stacks (peft/utils/transformers_weight_conversion.py, _convert_peft_config_moe, run by get_peft_model), so a
llama-named LoRA trains an adapter on every routed expert (a weight-sized delta built each forward, a weight gradient
for every expert). Checked on transformers 5.25 with train.py's default targets on tiny models of each type:
- peft 0.21.2 converts the types transformers' conversion table maps to qwen2_moe's pattern
  (transformers/conversion_mapping.py) and moves the names: they leave target_modules, so the shared experts and dense
  MLPs that hold them as Linears get no adapter. afmoe, beam, DeepSeek-V2/V3/V3.2, ERNIE-4.5-MoE, EXAONE-MoE, GLM-4.5
  (and its lite and DSA variants), LongCat-Flash, Qwen3-Next, Sarvam-MLA and Solar-Open lose their MLP adapters to the
  experts this way (on each type's default config); Qwen1.5-MoE (qwen2_moe itself) and Mixtral (its own pattern,
  other names) are not converted.
- peft 0.22.0 converts qwen2_moe too, and keeps a name in target_modules where every module it matches is a Linear
  (a shared expert's, a dense MLP's), adding the routed experts as target_parameters besides: on Qwen1.5-MoE and
  DeepSeek-V3 both the Linears and the routed experts get adapters. A name qualified by its parent
  (shared_expert.gate_proj) matches the Linears only: 0.22.0 converts it into no parameter, 0.21.2 still moves it.

So that a plan holds under either, train.py's default keeps 0.21's adapters (training/model.py experts_kept_off,
through default_moe_targets here): on the types listed below the MLP names are left out (their shared experts and
dense MLPs take no adapter), elsewhere they are named by parent (Qwen1.5-MoE's shared expert keeps its three). The
estimate prices that (estimate.lora_targets.moe_mlp_linears_adapted, estimate.lora_saved.lora_saved_delta_per_token),
and the plan's TRL line names the projections. Planning imports no peft, hence the table."""

from __future__ import annotations

from collections.abc import Iterable

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
    """Whether train.py's default gate/up/down_proj adapt this model's Linears of those names (its shared experts or
    dense MLPs), rather than being left out because peft 0.21 moves them onto its fused routed experts."""
    return model_type not in FUSED_EXPERT_TYPES


def default_moe_targets(model_type: str, targets: list[str], linears: Iterable[str]) -> tuple[list[str], list[str]]:
    """(the peft target_modules, the names left out) for llama-named `targets` on a mixture of experts whose nn.Linear
    layers are named `linears` (module paths). The MLP names are left out where mlp_names_reach_linears is false and
    otherwise named by their Linears' parents, which no peft converts into target_parameters (module docstring).
    Unchanged when `targets` has no MLP name or nothing else."""
    mlp = [t for t in targets if t.removesuffix("_proj") in MOVED_NAMES]
    others = [t for t in targets if t not in mlp]
    if not mlp or not others:  # nothing else to adapt: peft's choice stands
        return targets, []
    if not mlp_names_reach_linears(model_type):
        return others, mlp
    pairs = {tuple(name.rsplit(".", 2)[-2:]) for name in linears if "." in name}
    return others + [f"{parent}.{leaf}" for t in mlp for parent, leaf in sorted(pairs) if leaf == t], []
