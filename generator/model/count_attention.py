"""The attention the meta-device counts run a model with (model.saved_count, model.op_count, model.compiled_count).

On meta, SDPA would take its math path and keep every score; during a count it runs the flash kernel's own op
(aten._scaled_dot_product_flash_attention, what the GPU runs for a causal batch without a mask: it keeps q, k and v as
given, its output laid out like q, a float per head and row; the memory-efficient op where values are narrower than
queries, as MLA's), through transformers' attention interface where the class takes one, else in place of
F.scaled_dot_product_attention. A class that calls SDPA itself with fewer key heads than query heads and no
enable_gqa gets no fused kernel on the GPU either: torch runs its math kernel there as on meta, and that is what is
run. transformers' eager attention is reported too, for what it keeps per score. Torch and transformers are imported
only inside stand_ins, when sizing builds a model."""

from __future__ import annotations

import contextlib

ATTENTION = "saved_count"
"""Name of the stand-in registered with transformers' attention interface (a name with "flash" in it would make
transformers look for a flash-attention package)."""


def counted_kernel(model, attentions: tuple[str, ...]) -> str:
    """The attention the counts run `model` (built on meta) with: the flash stand-in through transformers' attention
    interface where the class takes one, else SDPA replaced by it, else (no SDPA path) eager."""
    if getattr(type(model), "_supports_attention_backend", False):
        return ATTENTION
    return "sdpa" if "sdpa" in attentions else "eager"


def decoder(model):
    """The language model's decoder, which takes inputs_embeds (a multimodal model's text decoder)."""
    return model.get_decoder() if hasattr(model, "get_decoder") else model.base_model


def set_kernel(model, kernel: str) -> None:
    """Run `model` with attention `kernel` from now on (a no-op where it already does)."""
    if getattr(model.config, "_attn_implementation", None) != kernel:
        model.set_attn_implementation(kernel)


@contextlib.contextmanager
def stand_ins(attended):
    """The flash kernel in place of SDPA (interface and functional), no mask built for it, and no packed-sequence
    detection (it reads tensor values, which meta has not): for the length of one count."""
    import torch
    import transformers.masking_utils as masking
    from transformers import AttentionInterface, AttentionMaskInterface

    functional, aten = torch.nn.functional, torch.ops.aten
    original_sdpa, original_packed = functional.scaled_dot_product_attention, masking.find_packed_sequence_indices

    def flash(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        # fewer key heads than query heads without enable_gqa (Falcon-7B's multi-query in transformers 5.17, which
        # calls SDPA itself): no fused kernel takes them, and torch runs its math kernel, which broadcasts the key
        # heads, upcasts to fp32 and keeps every score; it is the same composite on meta, so it is run and counted
        math = query.shape[1] != key.shape[1] and not enable_gqa
        # a class that always builds a mask (Falcon: allow_is_causal_skip=False) runs the masked kernel on the GPU:
        # it keeps what flash keeps besides the mask's bias, which the estimator prices on its own (mask_bytes)
        attended(query.shape[1], attn_mask is not None, math)
        # autocast runs SDPA in bf16 (an fp32 norm's q or k is cast; the functional call is replaced, so it is here)
        query, key, value = (t.to(torch.bfloat16) for t in (query, key, value))
        if math:
            return original_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale=scale)
        if value.shape[-1] != query.shape[-1]:  # MLA's narrower values: flash takes one head width, SDPA picks this
            return aten._scaled_dot_product_efficient_attention(query, key, value, None, True, dropout_p, True)[0]
        return aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, True, False, scale=scale)[0]

    def interface(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        # transformers' own SDPA forward repeats grouped k/v or passes enable_gqa: never the math kernel
        out = flash(query, key, value, None, dropout if module.training else 0.0, True, scaling, enable_gqa=True)
        return out.transpose(1, 2).contiguous(), None

    def softmax(*args, **kwargs):  # transformers' eager attention, over [batch, heads, queries, keys] (not a router)
        if args[0].dim() == 4:
            attended(args[0].shape[1], False, False)
        return original_softmax(*args, **kwargs)

    original_softmax = functional.softmax
    AttentionInterface.register(ATTENTION, interface)  # global, and needed before the kernel is set
    AttentionMaskInterface.register(ATTENTION, lambda *args, **kwargs: None)
    functional.scaled_dot_product_attention, masking.find_packed_sequence_indices = flash, lambda *a, **k: None
    functional.softmax = softmax
    try:
        yield
    finally:
        functional.scaled_dot_product_attention, masking.find_packed_sequence_indices = original_sdpa, original_packed
        functional.softmax = original_softmax
