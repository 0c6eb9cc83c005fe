"""Turn what the user typed for --model into a ModelSpec: preset name, known hub id, local directory or other hub id."""

from __future__ import annotations

import json
from pathlib import Path

from generator.errors import UserError
from generator.model.hub import hub_offline_reason
from generator.model.presets import HUB_IDS, PRESETS, preset_config
from generator.model.sizing import KNOWN_FAMILIES, spec_from_config
from generator.model.types import ModelSpec, expert_matrices, positions_limit


def _read_config_file(path: Path) -> dict:
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read {path}: {exc}; pass a directory holding a valid config.json") from exc
    if not isinstance(config, dict):
        raise UserError(f"{path} is not a JSON object; pass a directory holding a transformers config.json")
    return config


def _fetch_hub_config(repo_id: str) -> dict:
    """Download only config.json of a hub repo (no weights); a cached copy is used without asking the hub."""
    hint = f"pass a preset ({', '.join(PRESETS)}) or a local directory with config.json"
    try:
        from huggingface_hub import hf_hub_download
    except ImportError as exc:
        raise UserError(f"huggingface_hub is not installed, so '{repo_id}' cannot be fetched; {hint}") from exc
    try:
        return _read_config_file(Path(hf_hub_download(repo_id, "config.json", local_files_only=True)))
    except Exception:  # not cached: ask the hub below
        pass
    offline = hub_offline_reason()
    if offline:
        raise UserError(f"'{repo_id}' is not a bundled preset or cached, and the hub is offline ({offline}); {hint}")
    try:
        path = hf_hub_download(repo_id, "config.json")
    except Exception as exc:  # network, auth, missing repo: all mean the same thing to the user
        raise UserError(f"could not fetch config.json of '{repo_id}' ({type(exc).__name__}); {hint}") from exc
    return _read_config_file(Path(path))


def spec_from_any_config(config: dict, name: str, compiled: bool = True) -> ModelSpec:
    """A known family from its config's arithmetic, any other architecture by counting on the meta device (`compiled`
    False: without what its layer keeps compiled, LayerSaved.compiled_counted)."""
    if config.get("model_type") in KNOWN_FAMILIES:
        return spec_from_config(config, name)
    return _spec_by_meta(config, name, compiled)


# Config keys transformers' MoE families name their routed top-k with (Mixtral, Qwen-MoE, OLMoE, DeepSeek, Kimi, Aria;
# their expert count's: model.config_dims.EXPERT_COUNT_KEYS), and the experts' own width where it differs from the
# dense MLP's.
TOP_K_KEYS = ("num_experts_per_tok", "num_experts_per_token", "moe_topk")
EXPERT_WIDTH_KEYS = ("moe_intermediate_size",)


def _spec_by_meta(config: dict, name: str, compiled: bool = True) -> ModelSpec:
    """Other architectures: exact total from meta-device counting, the dimensions as transformers' config object
    gives them (its own names for each family, the text config of a multimodal checkpoint). An MoE (issue 26): every
    parameter counts for memory, only the routed top-k share of the fused experts for compute; shared experts and
    dense layers among the sparse ones count as dense matmuls (they are not 3-D experts)."""
    from generator.model.config_dims import expert_count, mixer_layers, recurrent_layers
    from generator.model.meta_cache import meta_counts

    if not config.get("model_type"):
        raise UserError(f"{name}: config.json has no 'model_type', so its architecture cannot be built")
    counts = meta_counts(config, name, compiled)
    total, experts_total, attentions, dims, layer_cls, linear_names, qk_norm = counts[:7]
    if not dims.get("num_attention_heads"):
        raise UserError(
            f"{name}: the config of {config['model_type']} names no attention heads (a state-space or recurrent "
            "model, or a decoder nested where its config does not say): the estimator prices attention decoders only"
        )
    for key in ("hidden_size", "num_hidden_layers", "vocab_size"):
        if not dims.get(key):
            raise UserError(f"{name}: its config has no '{key}', so its memory cannot be estimated")
    experts = expert_count(dims) if experts_total else 0
    top_k = int(next((dims[k] for k in TOP_K_KEYS if dims.get(k)), 0)) if experts else 0
    if experts and not top_k:  # every expert priced as active would overstate compute by experts / top-k
        raise UserError(
            f"{name}: its config has {experts} experts but no routed top-k (num_experts_per_tok), so the compute a "
            "token takes cannot be priced (nor can transformers route it); add num_experts_per_tok to the config"
        )
    idle = experts_total * (experts - top_k) // experts if experts and top_k else 0
    h, layers, heads = dims["hidden_size"], dims["num_hidden_layers"], dims["num_attention_heads"]
    vocab, tie = dims["vocab_size"], bool(dims.get("tie_word_embeddings"))
    embed = vocab * h
    per_layer = (total - embed - (0 if tie else embed)) // layers
    arch = (dims.get("architectures") or ["DecoderLayer"])[0]
    window, windowed = _windows(dims, layers)
    layer_cls = layer_cls or arch.replace("ForCausalLM", "DecoderLayer")
    return ModelSpec(
        name=name,
        model_type=str(config.get("model_type")),
        hidden_size=h,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=int(dims.get("num_key_value_heads") or heads),
        head_dim=_attention_head_width(dims, h // heads),
        intermediate_size=int(
            next((dims[k] for k in EXPERT_WIDTH_KEYS if experts and dims.get(k)), 0)
            or _expert_width(experts_total, experts, h, counts.expert_blocks, expert_matrices(counts.experts_layout))
            or dims.get("intermediate_size")
            or 4 * h
        ),
        vocab_size=vocab,
        tie_embeddings=tie,
        max_seq_len=positions_limit(dims.get("max_position_embeddings")),
        decoder_layer_cls=layer_cls,
        params_total=total,
        params_per_layer=per_layer,
        params_embedding=embed,
        largest_layer_params=max(embed, per_layer // 3),
        matmul_params_active=total - embed + (embed if tie else 0) - idle,
        num_experts=experts,
        experts_per_token=top_k,
        attentions=attentions,
        linear_names=linear_names,
        sliding_window=window if windowed == layers else None,
        partial_window=(windowed, window) if 0 < windowed < layers else None,
        qk_norm=qk_norm,
        layer_linears=counts.linears,
        not_linear=counts.not_linear,
        position_table=counts.position_table,
        experts_layout=counts.experts_layout,
        norms=counts.norms,
        layer_saved=counts.saved,
        layer_ops=counts.ops,
        recurrent_layers=recurrent_layers(dims),
        mixer_layers=mixer_layers(dims),
        expert_layers=counts.expert_blocks if experts and 0 < counts.expert_blocks < layers else None,
    )


def _attention_head_width(dims: dict, default: int) -> int:
    """The per-head width attention's score products run at. Multi-head latent attention (DeepSeek-V2/V3, Kimi)
    multiplies queries and keys qk_nope + qk_rope wide and values v_head_dim wide, where the config's head_dim is the
    rotary part alone (64 against 192 and 128 in DeepSeek-V3): the mean of the two widths prices QK^T and AV together
    exactly (tests/test_estimate_expert_flops.py)."""
    nope, rope, v = (dims.get(k) for k in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"))
    if nope and rope and v:
        return (int(nope) + int(rope) + int(v)) // 2
    return int(dims.get("head_dim") or default)


def _expert_width(params: int, experts: int, hidden: int, layers: int, matrices: int = 3) -> int:
    """One expert's width from the fused expert tensors' size (gate, up and down, or up and down without a gate:
    `matrices` x hidden x width per expert and layer), where the config names no expert width (Aria's experts are its
    intermediate_size); 0 where that does not divide out."""
    per_expert = matrices * hidden * experts * layers
    return params // per_expert if experts and layers and params % per_expert == 0 else 0


def _windows(dims: dict, layers: int) -> tuple[int | None, int]:
    """(the sliding window, how many decoder layers attend within it): the config's layer_types where it lists them,
    else every layer where a window is set and not switched off (use_sliding_window False, as Qwen2's)."""
    window = dims.get("sliding_window")
    if not window or dims.get("use_sliding_window") is False:
        return None, 0
    types = dims.get("layer_types")
    if isinstance(types, (list, tuple)) and types:
        return int(window), sum("sliding" in str(t) for t in types)
    return int(window), layers


def load_model(spec: str, trust_remote_code: bool = False, compiled: bool = True) -> ModelSpec:
    """Resolve --model: preset name, known hub id (offline), local dir with config.json, or hub id (config only).
    `compiled` False: an architecture counted on the meta device is counted without what its layer keeps compiled,
    which takes nine tenths of the count's time; for a script that compiles no layer (estimate.scripts.
    compiles_layers), whose estimate never reads it."""
    del trust_remote_code  # config.json is read as JSON; no remote code ever runs here
    if spec in PRESETS:
        return spec_from_config(preset_config(spec), spec)
    if spec.lower() in HUB_IDS:
        return spec_from_config(preset_config(HUB_IDS[spec.lower()]), spec)
    path = Path(spec).expanduser()
    if path.is_dir():
        config_file = path / "config.json"
        if not config_file.is_file():
            raise UserError(f"{path} has no config.json; pass a model directory, a preset or a hub id")
        return spec_from_any_config(_read_config_file(config_file), spec, compiled)
    if path.suffix == ".json" and path.is_file():
        return spec_from_any_config(_read_config_file(path), spec, compiled)
    if spec.count("/") != 1 or spec.startswith(("/", ".")):
        raise UserError(f"unknown model '{spec}': not a preset ({', '.join(PRESETS)}), a directory or a hub id")
    return spec_from_any_config(_fetch_hub_config(spec), spec, compiled)
