"""Shape of a model, as far as memory and FLOPs are concerned. Built from a transformers config without importing
transformers (a preset, or config.json read as JSON); other architectures fall back to meta-device counting."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class LayerSaved(NamedTuple):
    """What one decoder layer of the model's own code keeps for backward, per token, counted on the meta device at
    sizing (model.saved_count) under CUDA's bf16 autocast policy (model.cuda_autocast): bf16 weights unless named,
    dropout as configured, mean over the attention layers."""

    path: str
    """The attention path counted (estimate.attention.kernel_path): sdpa_causal (the flash kernel, no mask),
    sdpa_dense (a mask always built), sdpa_math (SDPA's math kernel: the class hands it fewer key heads than query
    heads without enable_gqa, and every score is kept) or eager (a class with no SDPA)."""
    trained: float
    """Bytes per token with every weight trained (a full fine-tune)."""
    frozen: float
    """Bytes per token with the weights frozen and the input requiring grad: LoRA's base before its adapters."""
    score_bytes: float | None
    """Bytes transformers' eager attention keeps per score (one query, one key, one head): its s x s terms; None
    where eager was not counted."""
    per_layer: int = 0
    """Bytes a layer keeps whatever its tokens, trained (DeepSeek-V3's router: a copy of its weight)."""
    per_layer_frozen: int = 0
    """The same, frozen."""
    pass_bytes: float | None = None
    """HBM bytes per token of one forward of its memory-bound ops (all but its GEMMs and attention kernel: norms,
    activations, biases, RoPE, casts), eager bf16, at the count's longest length (model.pass_count); None where the
    layer has no SDPA path to count it on."""
    trained_fp32: float | None = None
    """Bytes per token with every weight trained and fp32 under autocast (a full fine-tune's fp32 weights: its
    residual stream fp32 too), on the SDPA path; None where not counted (no SDPA path, or an s x s term)."""
    compiled: float | None = None
    """Bytes per token of one decoder block compiled (inductor's min-cut partitioner: model.compiled_count), every
    weight trained, bf16; None where not counted (a hybrid, no SDPA path, a block AOTAutograd cannot trace)."""
    compiled_frozen: float | None = None
    """The same with the weights frozen (LoRA's base before its adapters)."""
    compiled_fp32: float | None = None
    """The same trained with fp32 weights (a full fine-tune's fp32 stream)."""
    compiled_fp8: float | None = None
    """The compiled block trained with torchao's float8 Linears (train.py --precision fp8), bf16 weights; None where
    not counted (as compiled, or torchao not installed at sizing). Frozen, a float8 block keeps what compiled_frozen
    says."""
    compiled_fp8_fp32: float | None = None
    """The same with fp32 weights."""
    shared_inputs: tuple[tuple[str, ...], ...] = ()
    """Groups of the block's GEMM modules (names as in ModelSpec.layer_linears) its forward hands one tensor: q, k
    and v; Phi's fc1 with them. Compiled, peft's adapters on one group keep one bf16 copy of that tensor."""
    compiled_counted: bool = True
    """Sizing was asked for the compiled block's counts (model.loading.load_model's `compiled`). False for a script
    that compiles no layer (estimate.scripts.compiles_layers): the compiled fields are then None because they were
    never taken, not because the block cannot be traced, and pricing a compiled layer from them is refused."""


class LayerOps(NamedTuple):
    """Aten ops one decoder layer dispatches in a training step, (forward, backward), counted on the meta device at
    sizing (model.op_count), and the same for the tiny Mistral layer the probe's host rows time: what the host time
    of a layer with no rows of its own is scaled by (estimate.host_time.host_scale)."""

    full: tuple[float, float]
    """Every weight trained, fp32 under autocast (a full fine-tune)."""
    frozen: tuple[float, float]
    """bf16 weights frozen, the input requiring grad (LoRA's or QLoRA's base before its adapters)."""
    adapter: tuple[float, float]
    """What peft's LoRA adds to one Linear, without dropout."""
    adapter_dropout: tuple[float, float]
    """The same with LoRA dropout (TRL's 0.05)."""
    reference_full: tuple[float, float]
    """The probe's tiny Mistral layer, full."""
    reference_frozen: tuple[float, float]
    """The same, frozen (its LoRA row adds seven adapters: estimate.host_time.PROBE_ADAPTERS)."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    """Preset name, hub id or local path the user gave."""
    model_type: str
    """transformers `model_type` ("mistral", "llama", "qwen2", "mixtral")."""
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_embeddings: bool
    max_seq_len: int | None
    """max_position_embeddings; None where the config names no positive one (ALiBi models, XLNet's -1): no limit
    known."""
    decoder_layer_cls: str
    """Class name FSDP wraps, e.g. "MistralDecoderLayer"."""
    params_total: int
    """Exact parameter count (tied weights counted once)."""
    params_per_layer: int
    """Parameters in one decoder layer."""
    params_embedding: int
    """embed_tokens parameters."""
    largest_layer_params: int
    """Largest single module's own parameters (DeepSpeed's `largest_layer_params`)."""
    matmul_params_active: int
    """Parameters in matmuls a token passes through (decoder linears + lm_head; for MoE only the routed experts):
    the N in 6N + 12*L*h*s."""
    num_experts: int = 0
    experts_per_token: int = 0
    sliding_window: int | None = None
    """Tokens every decoder layer attends within (Mistral's 4096); None where no window applies to all layers."""
    attentions: tuple[str, ...] = ("sdpa", "flex", "eager")
    """Attention kernels transformers lets this architecture load with, as Workload.attention values: its model
    class's _supports_sdpa and _supports_flex_attn (eager always). Gemma-2 and GPT-OSS have no SDPA path (logit
    softcapping, attention sinks), OLMoE and GPT-2 no flex; the llama family has all three."""
    linear_names: tuple[str, ...] | None = None
    """The nn.Linear module names in one decoder layer, what LoRA's target_modules can match (read from the built
    model for architectures outside the llama family, e.g. Phi-3's qkv_proj and gate_up_proj); None: the llama
    family's q/k/v/o/gate/up/down_proj."""
    partial_window: tuple[int, int] | None = None
    """(layers, window) where only some decoder layers attend within a window (Gemma-2/3, GPT-OSS, Cohere2, OLMo-3:
    the config's layer_types); the estimate prices each kind of layer on its own attention path
    (estimate.attention.layer_groups)."""
    layer_linears: tuple[tuple[str, int, int, int], ...] = ()
    """Every nn.Linear of the decoder blocks as transformers builds them: (name within its block, in_features,
    out_features, how many blocks have it), read from the meta-built model for architectures outside the llama
    family: shared experts, dense MLPs among MoE layers, MLA's low-rank projections, fused qkv. The estimator prices
    the decoder's dense GEMMs from it (estimate.operators.linears). Empty for the closed-form families, whose
    projections follow from the config."""
    experts_layout: tuple[str, ...] = ()
    """Flags of transformers' experts layout in which this MoE differs from the default
    (model.config_dims.EXPERTS_LAYOUT): "has_gate" where each expert is up -> activation -> down with no gate
    (Nemotron-H), "has_bias" and "is_transposed" (GPT-OSS). The estimator prices an ungated expert's two matrices;
    train.py's QLoRA takes the default layout only."""
    norms: tuple[tuple[str, int, float, float], ...] = ()
    """The decoder block's norm modules as (leaf name, width, bytes per element kept for backward with the weight
    trained, with it frozen), each counted on the CPU on a bf16 input (model.meta._norms); () for the closed-form
    families, whose layer is the formula's (estimate.own_layer)."""
    layer_saved: LayerSaved | None = None
    """What the model's own decoder layer keeps for backward, counted (LayerSaved); None for the closed-form families,
    whose layer is the formula's, and where the count could not run (an MoE, a block meta cannot run alone)."""
    position_table: bool = False
    """Absolute positions are rows of a table max_seq_len long (GPT-2, OPT, GPT-BigCode, GPT-Neo, BioGPT): a longer
    sequence indexes past it and the first step fails, where rotary and ALiBi models only extrapolate."""
    not_linear: tuple[str, ...] = ()
    """Names (as in layer_linears) of the decoder's GEMM modules that are not nn.Linear: transformers' Conv1D in GPT-2
    and OpenAI-GPT. peft adapts them like Linears; torchao's float8 conversion (train.py's filter) leaves them bf16."""
    expert_layers: int | None = None
    """Decoder layers holding routed experts where fewer than all do (DeepSeek's first dense layers, Llama-4's
    interleaving); None: every layer of an MoE."""
    recurrent_layers: int = 0
    """Decoder layers without softmax attention (Mamba, other linear attention, short convolutions, a block holding an
    MLP alone: the config's layer_types). The estimator prices every layer as an attention layer and no recurrent
    scan, and the plan says so (plan.model_reasons.recurrent_reason)."""
    mixer_layers: int = 0
    """Decoder layers that run a recurrent mixer (Mamba) beside their softmax attention (the config's layer_types
    'hybrid': Falcon-H1, Zamba's shared blocks). Their mixer's projections are priced as the GEMMs they are
    (layer_linears), its scan and convolution not; the plan says so (plan.model_reasons.recurrent_reason)."""
    qk_norm: bool = False
    """The attention normalises q and k (RMSNorm modules q_norm and k_norm in the decoder layer: Qwen3, OLMo-2,
    Gemma-3), read from the built model for architectures outside the llama family; what those norms keep for
    backward and the passes they run are priced (estimate.activations, estimate.passes)."""
    layer_ops: LayerOps | None = None
    """Aten ops its decoder layer dispatches, and the probe's Mistral layer's (LayerOps); None for the closed-form
    families (the Mistral layer's code) and where the count could not run."""


def positions_limit(value) -> int | None:
    """A config's max_position_embeddings as a limit: a positive whole number, else None (absent, or XLNet's -1 for
    none)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def expert_matrices(experts_layout: tuple[str, ...]) -> int:
    """Weight matrices per expert in transformers' fused layout (ModelSpec.experts_layout): gate, up and down; up and
    down where the layout has no gate (Nemotron-H)."""
    return 2 if "has_gate" in experts_layout else 3
