"""What sizing reads from a transformers config object or its dict of dimensions: the widths (through each family's
attribute_map and per-layer widths), the routed expert count and the fused-experts layout, and the decoder layers
without softmax attention. Pure: no model is built here (generator/model/meta.py builds one on the meta device)."""

from __future__ import annotations

EXPERTS_LAYOUT = {
    "is_transposed": False, "has_bias": False, "has_gate": True, "is_concatenated": True, "has_post_expert_norm": False,
}  # fmt: skip
"""transformers' default layout of an MoE layer's fused experts (integrations/moe.py use_experts_implementation):
gate and up concatenated in one [experts, 2F, h] tensor, down [experts, h, F], no biases, no norm after each expert.
Six model types of transformers 5.25 declare another (GPT-OSS: transposed, with biases; Nemotron-H: no gate, an up
projection only). train.py's per-expert NF4 quantisation takes this layout only (training/moe.py)."""

DIM_KEYS = (
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
    "vocab_size", "max_position_embeddings", "tie_word_embeddings", "num_local_experts", "num_experts",
    "n_routed_experts", "moe_num_experts", "num_experts_per_tok", "num_experts_per_token", "moe_topk",
    "moe_intermediate_size", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "sliding_window",
    "use_sliding_window", "layer_types",
)  # fmt: skip
"""The language model's dimensions, read through transformers' config object: its attribute_map resolves each family's
own names (GPT-2's n_embd and n_layer, MPT's d_model), and a multimodal checkpoint (Gemma-3, Llama-4, Qwen3.5) keeps
them in its text config."""


def read_dim(config, key: str):
    """One dimension, the largest where it varies by layer (Gemma-3n's per-layer MLP widths as a list; Gemma-4's
    per-layer configs, whose global attribute transformers refuses to read): memory is sized for the widest layer."""
    try:
        value = getattr(config, key, None)
    except Exception:  # transformers' AmbiguousGlobalPerLayerAttributeError, and whatever a config computes lazily
        layers = getattr(config, "per_layer_config", None) or []
        values = [v for v in (read_dim(layer, key) for layer in layers) if v is not None]
        return max(values) if values else None
    widths = isinstance(value, (list, tuple)) and value and all(type(v) is int for v in value)
    if widths:
        return max(value)
    return value


EXPERT_COUNT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
"""Config keys transformers' MoE families name their routed expert count with (Mixtral, Qwen-MoE, OLMoE, DeepSeek,
Ernie), the first set one read."""


def expert_count(config) -> int:
    """The routed experts a config names, 0 for a dense model: a dict of DIM_KEYS, or a config object (read through
    read_dim, so its attribute_map and per-layer widths answer as for sizing)."""
    values = (config.get(k) if isinstance(config, dict) else read_dim(config, k) for k in EXPERT_COUNT_KEYS)
    return next((int(v) for v in values if v), 0)


def is_expert_tensor(shape, experts: int) -> bool:
    """A fused MoE experts tensor of a model with `experts` routed experts (expert_count): [experts, out, in], as
    transformers 5 holds them. Rank alone does not tell: the rank rule this replaced (3 or more dimensions, neither of
    the first two 1) took other weights for experts in 11 of transformers 5.25's causal-LM types: RecurrentGemma's
    RG-LRU gates [heads, width, width], Zamba's Mamba heads, XLNet's attention, Zaya's convolution, Inkling's two
    always-active shared experts, vision towers' patch embeddings (bench/results/cpu-experts-scan-2026-12-05.json
    lists every 3-D and 4-D weight of the 80 types that have one, and which are taken)."""
    return experts > 1 and len(shape) == 3 and shape[0] == experts


RECURRENT_LAYER_TYPES = ("linear_attention", "conv", "mamba", "recurrent")
"""Kinds in a config's layer_types for a decoder layer without softmax attention: Mamba and other linear attention
(Jamba, Qwen3-Next, Granite-4 hybrids; transformers 5 names Mamba layers linear_attention), short convolutions
(LFM)."""
MLP_ONLY_LAYER_TYPES = ("mlp", "moe")
"""Kinds for a block that is an MLP or a mixture of experts alone, with no attention of any kind (Nemotron-H, whose
decoder blocks each hold one mixer)."""


def recurrent_kind(layer_type) -> bool:
    """Whether a config's layer_types entry names a decoder layer without softmax attention."""
    return any(kind in str(layer_type) for kind in RECURRENT_LAYER_TYPES) or str(layer_type) in MLP_ONLY_LAYER_TYPES


MIXER_BESIDE_ATTENTION_LAYER_TYPES = ("hybrid",)
"""Kinds in a config's layer_types for a decoder layer that runs a recurrent mixer (Mamba) beside its softmax
attention: every layer of Falcon-H1, the shared attention blocks of Zamba and Zamba2 (transformers 5.25)."""


def _layers_of_kind(dims: dict, accepts) -> int:
    """How many entries of a config's layer_types `accepts` takes (none when the config has no such list)."""
    types = dims.get("layer_types")
    return sum(bool(accepts(t)) for t in types) if isinstance(types, (list, tuple)) else 0


def recurrent_layers(dims: dict) -> int:
    """Decoder layers without softmax attention (ModelSpec.recurrent_layers)."""
    return _layers_of_kind(dims, recurrent_kind)


def mixer_layers(dims: dict) -> int:
    """Decoder layers with softmax attention and a recurrent mixer beside it (ModelSpec.mixer_layers)."""
    return _layers_of_kind(dims, lambda t: str(t) in MIXER_BESIDE_ATTENTION_LAYER_TYPES)


def odd_layout(experts) -> list[str]:
    """The layout flags of one fused-experts module that differ from EXPERTS_LAYOUT (an undecorated module reads as
    the default)."""
    return [flag for flag, default in EXPERTS_LAYOUT.items() if getattr(experts, flag, default) != default]
