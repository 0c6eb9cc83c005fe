"""Which linear layers LoRA adapts, checked against the architecture's own layer names: a script's default q_proj and
v_proj do not exist in Phi-3 (qkv_proj) or GPT-2 (c_attn), where peft would stop with "target modules not found"."""

from __future__ import annotations

from generator.errors import UserError
from generator.estimate.moe import expert_params
from generator.estimate.scripts import ALL_LINEAR, default_lora_targets, lora_modules
from generator.model.types import ModelSpec
from generator.plan.types import PlanRequest


def lora_targets_for(request: PlanRequest, model: ModelSpec) -> tuple[tuple[str, ...], str | None]:
    """(the targets to plan with, a reason line or None). The script's default targets that the model lacks become all
    linear layers, which peft resolves on any architecture; targets the user named that it lacks are a user error."""
    targets = request.lora_targets or default_lora_targets(request.script)
    if request.method == "full":
        return targets, None
    if targets == ALL_LINEAR and model.num_experts and request.script != "train.py":
        layer_gb = 2 * expert_params(model) / model.num_layers / 1e9
        return targets, (
            f"LoRA targets: all-linear on a mixture of experts under --script {request.script}: peft's all-linear "
            "also adapts the router and, in the expert layouts peft converts (Mixtral's, and Qwen2-MoE's that OLMoE, "
            "Qwen3-MoE and DeepSeek share), the experts; this estimate leaves that out. peft folds the adapter into "
            f"each layer's expert weights on every forward: a second copy of them, {layer_gb:.1f} GB a layer in "
            f"bf16, which every layer keeps for backward without checkpointing ({layer_gb * model.num_layers:.0f} "
            "GB), and the experts' weight-gradient GEMMs run (tests/test_estimate_moe_saved.py counts it); "
            "--lora-targets q,k,v,o names what it prices"
        )
    if targets == ALL_LINEAR or model.linear_names is None:
        return targets, None
    missing = [m for m in lora_modules(targets) if m not in model.linear_names]
    if not missing:
        return targets, None
    has = ", ".join(model.linear_names)
    if request.lora_targets is not None:
        raise UserError(
            f"--lora-targets: {model.model_type} has no {', '.join(missing)} (its decoder layer's linear layers: "
            f"{has}); use --lora-targets all-linear"
        )
    return ALL_LINEAR, (
        f"LoRA targets: all linear layers: {model.model_type} has no {', '.join(missing)} for --script "
        f"{request.script}'s default (its decoder layer's linear layers: {has})"
    )
