"""Model sizing: what --model names, reduced to the dimensions memory and FLOPs depend on."""

from generator.model.loading import load_model, spec_from_any_config
from generator.model.meta import count_params_meta
from generator.model.presets import PRESETS
from generator.model.sizing import attention_flops_per_token, flops_per_token, spec_from_config
from generator.model.types import ModelSpec

__all__ = [
    "PRESETS",
    "ModelSpec",
    "count_params_meta",
    "flops_per_token",
    "attention_flops_per_token",
    "load_model",
    "spec_from_config",
    "spec_from_any_config",
]
