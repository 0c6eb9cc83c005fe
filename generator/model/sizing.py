"""Exact parameter counts and FLOPs per token for llama-family decoders, computed from config dimensions alone.

Covers Mistral, Llama, Qwen2 (q/k/v biases) and Mixtral (experts + router): embed, L x (attention + MLP + 2 RMSNorm),
final norm, lm_head (absent when tied). No transformers import: this is on the planning path.
"""

from __future__ import annotations

from generator.errors import UserError
from generator.model.types import ModelSpec, positions_limit

# model_type -> decoder layer class FSDP wraps (transformers naming).
DECODER_LAYER_CLS = {
    "mistral": "MistralDecoderLayer",
    "llama": "LlamaDecoderLayer",
    "qwen2": "Qwen2DecoderLayer",
    "mixtral": "MixtralDecoderLayer",
}
KNOWN_FAMILIES = tuple(DECODER_LAYER_CLS)
# Families whose attention projections carry biases even though the config has no attention_bias key.
_QKV_BIAS_FAMILIES = ("qwen2",)


def _get(config: dict, key: str):
    if key not in config or config[key] is None:
        raise UserError(f"config.json has no '{key}'; pass a preset name (see `plan --help`) or a complete config.json")
    return config[key]


def _layer_parts(config: dict) -> dict[str, int]:
    """Parameters of one decoder layer, split into attention, dense/expert MLP, router and norms."""
    h = int(_get(config, "hidden_size"))
    heads = int(_get(config, "num_attention_heads"))
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or h // heads)
    inter = int(_get(config, "intermediate_size"))
    q, kv = heads * head_dim, kv_heads * head_dim
    attn = h * q + 2 * h * kv + q * h
    if config.get("attention_bias") or config.get("model_type") in _QKV_BIAS_FAMILIES:
        attn += q + 2 * kv
    if config.get("attention_bias"):  # llama's attention_bias also puts a bias on o_proj
        attn += h
    mlp_one = 3 * h * inter + (2 * inter + h if config.get("mlp_bias") else 0)
    experts = int(config.get("num_local_experts") or 0)
    return {
        "attn": attn,
        "mlp_one": mlp_one,
        "experts": experts,
        "mlp": mlp_one * max(experts, 1),
        "router": h * experts,
        "norms": 2 * h,
    }


def spec_from_config(config: dict, name: str) -> ModelSpec:
    """Build a ModelSpec from a config.json-like dict of a known llama-family model."""
    model_type = config.get("model_type")
    if model_type not in DECODER_LAYER_CLS:
        raise UserError(f"model_type '{model_type}' is not a llama-family decoder; use count_params_meta for it")
    h = int(_get(config, "hidden_size"))
    heads = int(_get(config, "num_attention_heads"))
    layers = int(_get(config, "num_hidden_layers"))
    vocab = int(_get(config, "vocab_size"))
    parts = _layer_parts(config)
    per_layer = parts["attn"] + parts["mlp"] + parts["router"] + parts["norms"]
    tie = bool(config.get("tie_word_embeddings", False))
    embed = vocab * h
    lm_head = 0 if tie else vocab * h
    total = embed + layers * per_layer + h + lm_head
    top_k = int(config.get("num_experts_per_tok") or 0) if parts["experts"] else 0
    active_mlp = parts["mlp_one"] * top_k if parts["experts"] else parts["mlp"]
    # The tied lm_head still multiplies every token, so it counts as a matmul either way.
    matmul_active = layers * (parts["attn"] + active_mlp + parts["router"]) + vocab * h
    # DeepSpeed's largest_layer_params: max over modules of their own (non-recursive) parameters. Fused MoE experts
    # (transformers 5) hold every expert in one module.
    head_dim = int(config.get("head_dim") or h // heads)
    inter = int(config["intermediate_size"])
    largest_linear = max(h * heads * head_dim, h * inter)
    largest = max(embed, vocab * h, largest_linear if not parts["experts"] else parts["mlp"])
    window = config.get("sliding_window")
    if config.get("use_sliding_window") is False:
        window = None
    return ModelSpec(
        name=name,
        model_type=model_type,
        hidden_size=h,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=head_dim,
        intermediate_size=inter,
        vocab_size=vocab,
        tie_embeddings=tie,
        max_seq_len=positions_limit(config.get("max_position_embeddings")),
        decoder_layer_cls=DECODER_LAYER_CLS[model_type],
        params_total=total,
        params_per_layer=per_layer,
        params_embedding=embed,
        largest_layer_params=largest,
        matmul_params_active=matmul_active,
        num_experts=parts["experts"],
        experts_per_token=top_k,
        sliding_window=int(window) if window else None,
    )


def attention_span(model: ModelSpec, seq_len: int) -> int:
    """Keys each query attends to at most: the sequence, capped by a sliding window."""
    return min(seq_len, model.sliding_window) if model.sliding_window else seq_len


def attention_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """12*L*h*s: QK^T and AV, forward and backward. h is the query width (heads x head_dim): GQA does not shrink
    them. Causal masking is not halved (the MFU convention)."""
    return 12.0 * model.num_layers * model.num_heads * model.head_dim * attention_span(model, seq_len)


def flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """Model FLOPs per trained token, 6N + 12*L*h*s (PaLM appendix B; the MFU convention): recomputation never
    counts."""
    return 6.0 * model.matmul_params_active + attention_flops_per_token(model, seq_len)
