"""Parameter counting by instantiating a config on the meta device: the fallback for architectures the closed-form
counter does not know. Imports torch/transformers lazily, so it is never on the planning path for known families."""

from __future__ import annotations


def count_params_meta(config_dict: dict) -> int:
    """Exact parameter count (tied weights once) of AutoModelForCausalLM built from `config_dict` with no memory."""
    return meta_counts(config_dict)[0]


def meta_counts(config_dict: dict) -> tuple[int, int]:
    """(all parameters, those in fused MoE experts) of the model built on the meta device. Fused experts are the
    parameters of 3 or more dimensions (transformers 5 holds an MoE layer's experts as [experts, out, in] tensors of
    one module); a dense model has none."""
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
    return sum(p.numel() for p in params), sum(p.numel() for p in params if p.dim() >= 3)
