"""What a model's own decoder layer keeps for backward, counted on the meta device at sizing (ModelSpec.layer_saved).

The model model.meta builds (no weights) runs forward in bf16 and train mode on a meta input that requires grad, under
saved_tensors_hooks that record each storage autograd saves, once, while the graph holds it (parameters left out),
against the decoder block that first saved it. Nothing is computed: each meta kernel gives its result's shape, dtype
and layout, and torch writes its meta kernels to match CUDA's (layout included: the flash kernel's output follows q's),
so the count is the GPU graph's for the model's own code, whatever its MLP, norms, projections or dropout.

Attention: on meta, SDPA would take its math path and keep every score; during the count it runs the flash kernel's
own op (aten._scaled_dot_product_flash_attention, what the GPU runs for a causal batch without a mask: it keeps q, k
and v as given, its output laid out like q, a float per head and row), through transformers' attention interface
where the class takes one, else in place of F.scaled_dot_product_attention. That is the estimator's sdpa_causal
path; a model with no SDPA counts its eager path. transformers' eager attention is counted at two lengths for what it
keeps per score (its s x s terms). Torch is imported only here, only when sizing builds a model."""

from __future__ import annotations

import contextlib
import weakref
from collections import Counter
from typing import NamedTuple

from generator.model.types import LayerSaved

TOKENS = (128, 256)
"""Sequence lengths of the count (batch 1): per-token bytes must agree at both, or an s x s term was kept."""
ATTENTION = "saved_count"
"""Name of the stand-in registered with transformers' attention interface (a name with "flash" in it would make
transformers look for a flash-attention package)."""
COUNTED_LAYERS = 6
"""Decoder blocks the count runs (the first ones; the rest are set aside for it): the first keeps the rotary tables
every layer shares, the others are the mean."""
LINEAR_TOLERANCE = 0.01
"""Relative difference of the per-token counts at the two lengths past which the path kept an s x s term."""


class _Box:
    """What the graph holds instead of the tensor, so the count forgets a storage when its last holder is freed."""

    __slots__ = ("t", "__weakref__")


def layer_saved(model, stack, attentions: tuple[str, ...]) -> LayerSaved | None:
    """The count for `model` (built on meta) whose decoder blocks are the ModuleList `stack`; None where it cannot be
    taken (a forward meta cannot run, an s x s term on the causal path, no attention layer found)."""
    import torch

    if stack is None or not len(stack):
        return None
    backend = bool(getattr(type(model), "_supports_attention_backend", False))
    path = "sdpa_causal" if backend or "sdpa" in attentions else "eager"
    model.to(torch.bfloat16).train()
    short, long = TOKENS
    rest = list(stack)[COUNTED_LAYERS:]  # every block of a deep model runs each count: the first few do
    del stack[COUNTED_LAYERS:]
    try:
        causal = _counts(model, stack, ATTENTION if backend else "sdpa", ((True, short), (True, long), (False, short)))
        eager = _counts(model, stack, "eager", ((True, short), (True, long), (False, short), (False, long)))
    finally:
        stack.extend(rest)
        model.requires_grad_(True)
    score = linear = frozen = None
    if eager is not None:  # per token, c(s) / s = a + b s: b over the heads of one layer is what a score keeps
        (t1, heads, _), (t2, _, _), (f1, _, _), (f2, _, _) = eager
        b_trained, b_frozen = (t2 - t1) / (long - short), (f2 - f1) / (long - short)
        score = round(b_trained / heads, 3)
        linear, frozen = t1 - b_trained * short, f1 - b_frozen * short
    if path == "sdpa_causal":
        if causal is None:
            return None
        (linear, _, masked), (longer, _, _), (frozen, _, _) = causal
        if abs(longer - linear) > LINEAR_TOLERANCE * linear:
            return None
        path = "sdpa_dense" if masked else path
    if linear is None:
        return None
    return LayerSaved(path, round(linear, 1), round(frozen, 1), score)


def _counts(model, stack, kernel: str, runs) -> list[_Count] | None:
    """_per_token for each (trained, tokens) of `runs` under one kernel; None where any cannot be counted."""
    try:
        counts = [_per_token(model, stack, kernel, trained, tokens) for trained, tokens in runs]
    except Exception:  # an op meta cannot run, a block that needs more than its input: the formula prices the layer
        return None
    return None if None in counts else counts


class _Count(NamedTuple):
    per_token: float
    """Bytes per token the attention layers keep, mean over them, the first left out where others exist (it also keeps
    the rotary tables all layers share)."""
    heads: int
    """Query heads of one such layer."""
    masked: bool
    """A mask reached the attention kernel."""


def _per_token(model, stack, kernel: str, trained: bool, tokens: int) -> _Count | None:
    """One forward's count; None where no layer ran attention."""
    import torch

    model.requires_grad_(trained)
    params = {p.untyped_storage()._cdata for p in model.parameters()}
    current: list[int | None] = [None]
    attention_layers: dict[int, int] = {}
    masks: list[bool] = []
    owner: dict[int, tuple[int | None, int]] = {}
    holders: Counter = Counter()
    hooks = []
    for i, block in enumerate(stack):
        hooks.append(block.register_forward_pre_hook(lambda m, a, i=i: current.__setitem__(0, i)))
        hooks.append(block.register_forward_hook(lambda m, a, o: current.__setitem__(0, None)))

    def release(key):
        holders[key] -= 1
        if not holders[key]:
            del owner[key]

    def pack(t):
        storage = t.untyped_storage()
        key = storage._cdata
        if key not in params:
            owner.setdefault(key, (current[0], storage.nbytes()))
            holders[key] += 1
        box = _Box()
        box.t = t
        if key in owner:
            weakref.finalize(box, release, key)
        return box

    def attended(heads: int, masked: bool) -> None:
        if current[0] is not None:
            attention_layers[current[0]] = heads
            masks.append(masked)

    hidden = model.get_input_embeddings().weight.shape[-1]
    embeds = torch.empty(1, tokens, hidden, device="meta", dtype=torch.bfloat16, requires_grad=True)
    try:
        with _stand_ins(attended), torch.autograd.graph.saved_tensors_hooks(pack, lambda box: box.t):
            _set_kernel(model, kernel)
            out = _decoder(model)(inputs_embeds=embeds, use_cache=False)
        per_layer = Counter()
        for layer, nbytes in owner.values():
            per_layer[layer] += nbytes
        del out
    finally:
        for h in hooks:
            h.remove()
    layers = sorted(attention_layers)
    layers = layers[1:] if len(layers) > 1 else layers
    if not layers:
        return None
    return _Count(sum(per_layer[i] for i in layers) / len(layers) / tokens, attention_layers[layers[0]], any(masks))


def _decoder(model):
    """The language model's decoder, which takes inputs_embeds (a multimodal model's text decoder)."""
    return model.get_decoder() if hasattr(model, "get_decoder") else model.base_model


def _set_kernel(model, kernel: str) -> None:
    if getattr(model.config, "_attn_implementation", None) != kernel:
        model.set_attn_implementation(kernel)


@contextlib.contextmanager
def _stand_ins(attended):
    """The flash kernel in place of SDPA (interface and functional), no mask built for it, and no packed-sequence
    detection (it reads tensor values, which meta has not): for the length of one count."""
    import torch
    import transformers.masking_utils as masking
    from transformers import AttentionInterface, AttentionMaskInterface

    functional = torch.nn.functional
    original_sdpa, original_packed = functional.scaled_dot_product_attention, masking.find_packed_sequence_indices

    def flash(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        # a class that always builds a mask (Falcon: allow_is_causal_skip=False) runs the masked kernel on the GPU:
        # it keeps what flash keeps besides the mask's bias, which the estimator prices on its own (mask_bytes)
        attended(query.shape[1], attn_mask is not None)
        out = torch.ops.aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, True, False, scale=scale)
        return out[0]

    def interface(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        out = flash(query, key, value, None, dropout if module.training else 0.0, True, scaling)
        return out.transpose(1, 2).contiguous(), None

    def softmax(*args, **kwargs):  # transformers' eager attention (the MoE routers are never counted)
        attended(args[0].shape[-3] if args[0].dim() >= 3 else 1, True)
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
