"""What a model's own decoder layer keeps for backward beyond the llama layer the activation formula
(estimate.activations) prices.

Counted whole (ModelSpec.layer_saved, model.saved_count): a model sized on the meta device ran its own layer's forward
there once, trained and frozen, and the count stands in for the formula at the path and levers it ran under; the
formula's own differences between paths and levers (another attention kernel, LoRA's adapters, Liger's or inductor's
fused norms and activations, an fp32 stream) are kept on top. bench/scripts/saved_audit.py counts whole layers of
each family on the CPU, from real tensors, against the estimate (bench/results/cpu-saved-audit-*.json).

Where there is no count (a closed-form family, a hybrid of several block classes, a block meta cannot run): the
norms, each counted alone on the CPU (ModelSpec.norms: each norm module run on a bf16 input, trained and frozen). The
llama RMSNorm keeps its fp32 upcast (4 bytes an element) and, with a trained weight, the normalised bf16 tensor the
weight multiplies (2): 6 and 4. Gemma's and OLMo-2's multiply the weight in fp32 (8 and 4), Gemma-2/3 have four per
layer, GPT-NeoX's LayerNorm keeps its bf16 input and two floats a row (2). Pure; no torch."""

from __future__ import annotations

from generator.model.types import ModelSpec

LLAMA_NORM_BYTES = {True: 6.0, False: 4.0}
"""Bytes per element transformers' LlamaRMSNorm keeps on a bf16 input, with its weight trained and frozen (counted
by model.meta._norms: 6.016 and 4.016, the 0.016 being a float per row of 256)."""
HEAD_NORMS = ("q_norm", "k_norm", "q_layernorm", "k_layernorm")


def norms_delta_per_token(model: ModelSpec, trained: bool, fused: bool, residual: int) -> float:
    """Bytes per token and layer the model's norms keep beyond the formula's two llama RMSNorms (and, where it has
    them, its llama-style q and k norms); zero for a model sized in closed form (no counted norms). `fused`: Liger's
    or inductor's norm, which keeps only its `residual`-byte input: only norms beyond two add.

    Never below zero: with a LayerNorm's smaller count taken (2 bytes an element), Phi-2, GPT-J and GPT-2 layers read
    13-15% below what they keep (bench/scripts/saved_audit.py), because the rest of their layer is not the formula's
    either (a GELU MLP priced as SwiGLU, a parallel block's shared norm); a counted layer takes it with the rest
    (own_layer_delta), and without a count no layer is priced below the llama formula's norms."""
    if not any(name not in HEAD_NORMS for name, *_ in model.norms):
        return 0.0
    if fused:
        return max(_fused_norms(model, residual), 0.0)
    return float(max(_unfused_norms(model, trained), 0.0))


def fused_qkv_bytes(model: ModelSpec, path: str) -> int:
    """Bytes per token a fused q/k/v projection keeps beyond the formula's attention terms (Phi-3's qkv_proj, GPT-2's
    c_attn, Falcon's query_key_value: one Linear h -> q + 2 kv in ModelSpec.layer_linears). The value the kernel keeps
    is a view of that output, so the whole storage stays alive, its q and k parts too (2 (q + kv) bytes), where the
    kernel gets v as it is (not repeated for GQA: SDPA's causal path, flex, or as many kv heads as heads). And RoPE
    of a slice makes q contiguous heads-first, which SDPA's output follows on the CPU, so o_proj's input is a copy
    (2 q; under eager and flex o_proj_input_bytes has it already). Counted on the CPU (bench/scripts/saved_audit.py,
    Phi-3: 0.914 of what it keeps before, 1.00 with both); on the GPU the flash kernel's output follows q's layout too
    (torch's meta kernel for it, written to match CUDA's, allocates it like q). A counted model's own layer has both
    in its count (own_layer_delta)."""
    h, q, kv = model.hidden_size, model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    if not any(a == h and b == q + 2 * kv for _, a, b, _ in model.layer_linears):
        return 0
    repeated = path in ("sdpa_dense", "eager") and kv != q
    return (0 if repeated else 2 * (q + kv)) + (2 * q if path.startswith("sdpa") else 0)


def own_layer_delta(
    model: ModelSpec,
    trained: bool,
    fused: bool,
    residual: int,
    formula: float | None,
    tokens: int,
    compiled: bool = False,
    fp8: bool = False,
) -> float:
    """Bytes per token and layer the model's own layer keeps beyond the formula: its count less `formula` (what the
    formula prices for the layer as counted, activations._formula_as_counted), with what it keeps whatever its
    tokens spread over the micro-batch's `tokens`; or without a count its norms (norms_delta_per_token). `fused`:
    Liger's or inductor's norms, which keep only their input, where the count ran the model's own; the rest of the
    difference (an MLP's, a projection's) is taken as counted. A full fine-tune on an fp32 stream takes the fp32
    count where there is one (counted_stream). `compiled` (float8, --compile-layers): the compiled block's own count
    where there is one (compiled_count; `fp8`: with float8 Linears), against `formula` priced as compiled."""
    counted = model.layer_saved
    if counted is None or formula is None:
        return norms_delta_per_token(model, trained, fused, residual)
    per_token, per_layer = (
        (counted.trained, counted.per_layer) if trained else (counted.frozen, counted.per_layer_frozen)
    )
    count = compiled_count(model, trained, residual, fp8) if compiled else None
    if count is not None:  # the partitioner's choice, as counted
        return count + per_layer / tokens - formula
    if counted_stream(model, trained, residual) == 4:
        per_token = counted.trained_fp32
    delta = per_token + per_layer / tokens - formula
    if fused and model.norms:  # the norms the count ran unfused, as a fused norm keeps them
        delta += _fused_norms(model, residual) - _unfused_norms(model, trained)
    return delta


def compiled_count(model: ModelSpec, trained: bool, residual: int, fp8: bool = False) -> float | None:
    """Bytes per token the model's own decoder block keeps compiled (LayerSaved.compiled: inductor's min-cut
    partitioner, counted at sizing), trained at the stream counted_stream names or frozen; None where not counted.
    `fp8`: with train.py's float8 Linears, whose trained block keeps their inputs cast (LayerSaved.compiled_fp8; the
    bf16 block's count where torchao was not there to count it); frozen, the bf16 block's."""
    counted = model.layer_saved
    if counted is None:
        return None
    if not counted.compiled_counted:  # sized for a caller that prices no compiled layer: pricing one is its mistake
        raise ValueError(f"{model.name} was sized without its compiled layer's counts (load_model(compiled=False))")
    if not trained:
        return counted.compiled_frozen
    fp32 = counted_stream(model, trained, residual, compiled=True) == 4
    low = counted.compiled_fp8_fp32 if fp32 else counted.compiled_fp8
    if fp8 and low is not None:
        return low
    return counted.compiled_fp32 if fp32 else counted.compiled


def counted_stream(model: ModelSpec, trained: bool, residual: int, compiled: bool = False) -> int:
    """Bytes per element of the residual stream the count ran at: 4 where a full fine-tune's fp32 weights run under
    autocast and the fp32 count was taken (LayerSaved.trained_fp32; `compiled`: compiled_fp32), else 2. Under CUDA's
    autocast a LayerNorm keeps an fp32 input at either stream, where the formula's llama norm keeps more only at 4: the
    formula's step from 2 to 4 would count it twice (StarCoder2: 4h a token and layer)."""
    counted = model.layer_saved
    fp32 = counted is not None and (counted.compiled_fp32 if compiled else counted.trained_fp32) is not None
    return 4 if trained and residual == 4 and fp32 else 2


def _unfused_norms(model: ModelSpec, trained: bool) -> float:
    """What the counted norms keep beyond the formula's llama norms, unfused (may be negative: a LayerNorm keeps
    less)."""
    delta = sum(w * (t if trained else f) for name, w, t, f in model.norms if name not in HEAD_NORMS)
    delta -= 2 * LLAMA_NORM_BYTES[trained] * model.hidden_size
    if model.qk_norm:
        widths = {"q": model.num_heads * model.head_dim, "k": model.num_kv_heads * model.head_dim}
        for name, _, t, f in model.norms:
            if name in HEAD_NORMS:
                delta += ((t if trained else f) - LLAMA_NORM_BYTES[trained]) * widths[name[0]]
    return delta


def _fused_norms(model: ModelSpec, residual: int) -> float:
    """The same, fused: each norm beyond the formula's two keeps its `residual`-byte input."""
    layer = [name for name, *_ in model.norms if name not in HEAD_NORMS]
    return float((len(layer) - 2) * residual * model.hidden_size) if layer else 0.0
