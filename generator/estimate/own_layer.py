"""What a model's own decoder layer keeps for backward beyond the llama layer the activation formula
(estimate.activations) prices: its norms, counted, and a fused q/k/v projection's storage.

Norms: a model sized on the meta device carries its decoder block's norms as counted on the CPU (ModelSpec.norms:
each norm module run alone on a bf16 input, trained and frozen). The llama RMSNorm keeps its fp32 upcast (4 bytes an
element) and, with a trained weight, the normalised bf16 tensor the weight multiplies (2): 6 and 4. Gemma's and
OLMo-2's multiply the weight in fp32 (8 and 4), Gemma-2/3 have four per layer, GPT-NeoX's LayerNorm keeps its bf16
input and two floats a row (2). bench/scripts/saved_audit.py counts whole layers of each family on the CPU against
the formula (bench/results/cpu-saved-audit-2026-12-04.json). Pure; no torch."""

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
    either (a GELU MLP priced as SwiGLU, a parallel block's shared norm); the saving waits until that is counted too,
    so no layer is priced below the llama formula's norms."""
    layer = [(w, t if trained else f) for name, w, t, f in model.norms if name not in HEAD_NORMS]
    if not layer:
        return 0.0
    if fused:
        return float(max(len(layer) - 2, 0) * residual * model.hidden_size)
    delta = sum(w * b for w, b in layer) - 2 * LLAMA_NORM_BYTES[trained] * model.hidden_size
    if model.qk_norm:
        widths = {"q": model.num_heads * model.head_dim, "k": model.num_kv_heads * model.head_dim}
        for name, _, t, f in model.norms:
            if name in HEAD_NORMS:
                delta += ((t if trained else f) - LLAMA_NORM_BYTES[trained]) * widths[name[0]]
    return float(max(delta, 0.0))


def fused_qkv_bytes(model: ModelSpec, path: str) -> int:
    """Bytes per token a fused q/k/v projection keeps beyond the formula's attention terms (Phi-3's qkv_proj, GPT-2's
    c_attn, Falcon's query_key_value: one Linear h -> q + 2 kv in ModelSpec.layer_linears). The value the kernel keeps
    is a view of that output, so the whole storage stays alive, its q and k parts too (2 (q + kv) bytes), where the
    kernel gets v as it is (not repeated for GQA: SDPA's causal path, flex, or as many kv heads as heads). And RoPE
    of a slice makes q contiguous heads-first, which SDPA's output follows on the CPU, so o_proj's input is a copy
    (2 q; under eager and flex o_proj_input_bytes has it already). Counted on the CPU (bench/scripts/saved_audit.py,
    Phi-3: 0.914 of what it keeps before, 1.00 with both); whether a GPU kernel's output follows q's layout too is
    not checked, so the copy is priced as the CPU keeps it (at most 2 q too many)."""
    h, q, kv = model.hidden_size, model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    if not any(a == h and b == q + 2 * kv for _, a, b, _ in model.layer_linears):
        return 0
    repeated = path in ("sdpa_dense", "eager") and kv != q
    return (0 if repeated else 2 * (q + kv)) + (2 * q if path.startswith("sdpa") else 0)
