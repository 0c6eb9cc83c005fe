"""Parameter counting by instantiating a config on the meta device: the fallback for architectures the closed-form
counter does not know. Imports torch/transformers lazily, so it is never on the planning path for known families."""

from __future__ import annotations

from typing import NamedTuple


class MetaCounts(NamedTuple):
    total: int
    """Every parameter, a tied weight once."""
    experts: int
    """Parameters of fused MoE experts: those of 3 or more dimensions (transformers 5 holds an MoE layer's experts
    as [experts, out, in] tensors of one module); none for a dense model."""
    attentions: tuple[str, ...]
    """Attention kernels the model class loads with (ModelSpec.attentions): eager, plus sdpa and flex where its
    _supports_sdpa / _supports_flex_attn say so."""


def count_params_meta(config_dict: dict) -> int:
    """Exact parameter count (tied weights once) of AutoModelForCausalLM built from `config_dict` with no memory."""
    return meta_counts(config_dict).total


def meta_counts(config_dict: dict) -> MetaCounts:
    """Counts and attention kernels of the model built on the meta device."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(config_dict)
    model_type = cfg.pop("model_type")
    cfg = {k: v for k, v in cfg.items() if not k.startswith("_")}
    config = AutoConfig.for_model(model_type, **cfg)
    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(config)
    # accelerate's init_empty_weights re-creates parameters on meta after transformers 5 tied them, so a tied lm_head
    # would be counted twice; tying again restores the shared Parameter (checked with transformers 5.x, test pins it).
    model.tie_weights()
    # parameters() yields a tied weight once.
    params = list(model.parameters())
    cls = type(model)
    supported = {"sdpa": cls._supports_sdpa, "flex": cls._supports_flex_attn, "eager": True}
    attentions = tuple(kernel for kernel, ok in supported.items() if ok)
    return MetaCounts(sum(p.numel() for p in params), sum(p.numel() for p in params if p.dim() >= 3), attentions)
