"""What a model's own decoder layer keeps for backward, counted on the meta device at sizing (ModelSpec.layer_saved).

The model model.meta builds (no weights) runs forward in bf16 and train mode on a meta input that requires grad, under
saved_tensors_hooks that record each storage autograd saves, once, while the graph holds it (parameters left out),
against the decoder block that first saved it. Nothing is computed: each meta kernel gives its result's shape, dtype
and layout, and torch writes its meta kernels to match CUDA's (layout included: the flash kernel's output follows q's),
so the count is the GPU graph's for the model's own code, whatever its MLP, norms, projections or dropout.

Attention runs the flash kernel's stand-in (model.count_attention). That is the estimator's sdpa_causal path; a model
with no SDPA counts its eager path, and one whose class calls SDPA with fewer key heads than query heads and no
enable_gqa counts torch's math kernel, as the GPU runs it (sdpa_math). transformers' eager attention is counted too, for
what it keeps per score (its s x s terms). Each is counted at three lengths, which also gives what a layer keeps
whatever its tokens. An MoE's experts run transformers' grouped_mm path, as on an H100 or H200. Torch is imported only
here and in count_attention, only when sizing builds a model."""

from __future__ import annotations

import contextlib
from typing import NamedTuple

from generator.model.compiled_count import NOT_COUNTED, compiled_counts
from generator.model.count_attention import counted_kernel, decoder, set_kernel, stand_ins
from generator.model.cuda_autocast import cuda_autocast
from generator.model.pass_count import counter
from generator.model.saved_storages import SavedStorages
from generator.model.types import LayerSaved

TOKENS = (128, 256, 512)
"""Sequence lengths of the count (batch 1): three points of a layer's bytes against its tokens."""
COUNTED_LAYERS = 6
"""Decoder blocks the count runs (the first ones; the rest are set aside for it): the first keeps the rotary tables
every layer shares, the others are the mean."""
LINEAR_TOLERANCE = 0.01
"""How far off the line through the first two lengths the causal path's third may be before it counts as having kept
an s x s term."""


def layer_saved(
    model,
    stack,
    attentions: tuple[str, ...],
    kind: list[int] | None = None,
    attention_share: float | None = None,
    compiled: bool = True,
) -> LayerSaved | None:
    """The count for `model` (built on meta) whose decoder blocks are the ModuleList `stack`, the mean over the
    blocks `kind` lists (the layers the estimate's per-layer terms describe: an MoE's expert layers, not DeepSeek's
    first dense ones; every block where None); None where it cannot be taken (a forward meta cannot run, an s x s
    term on the causal path, no attention layer found). A hybrid's mean weighs its attention blocks and the others
    by `attention_share`, the share of its layers with attention (the config's layer_types), where given: the first
    blocks are not the model's mix (RecurrentGemma's blocks 1-5 hold two attention layers of five, its layers one
    of three).

    A layer keeps c(s) = C + a s + b s^2 bytes at s tokens: C what does not grow with them (DeepSeek-V3's router
    keeps a copy of its weight for backward: cast to fp32 in its code, back to bf16 by autocast, 3.7 MB a layer), a
    per token, b per query and key pair (eager's scores, over the heads). The causal path is fitted on its first two
    lengths with b = 0 and must hold at the third, except where SDPA took its math kernel (sdpa_math: more query
    heads than key heads and no enable_gqa), which keeps every score as eager attention does."""
    import torch

    if not len(stack):
        return None
    kernel = counted_kernel(model, attentions)
    path = "eager" if kernel == "eager" else "sdpa_causal"
    model.to(torch.bfloat16).train()
    kind = set(range(len(stack)) if kind is None else kind)
    # every block of a deep model runs each count: the first few do, with at least three of the kind
    runs = max(COUNTED_LAYERS, sorted(kind)[min(len(kind), 3) - 1] + 1 if kind else 0)
    rest = list(stack)[runs:]
    del stack[runs:]
    try:
        # each stops at the first count that fails or finds no attention layer (a recurrent model, whose reference
        # scan takes seconds a pass on meta)
        causal = _both(model, stack, kernel, kind, attention_share) if path != "eager" else None
        math = causal is not None and causal[0][0].math
        # eager's score, the fp32 stream's and the compiled block's counts: not where the math kernel keeps its own
        # scores (the stream's and the compiled block's are taken linear in the tokens)
        grows_linearly = causal is not None and not math
        eager = _both(model, stack, "eager", kind, attention_share) if path == "eager" or grows_linearly else None
        stream = _counts(model, stack, kernel, True, kind, attention_share, torch.float32) if grows_linearly else None
        # a compiled layer's own count, of the first block of the kind past the first (not a hybrid's mix of blocks)
        block = _past_first(sorted(kind))[0] if kind else 1
        one_kind = grows_linearly and attention_share is None and block < len(stack)
        counted = compiled_counts(model, stack, block, kernel, traced=compiled) if one_kind else NOT_COUNTED
    finally:
        stack.extend(rest)
        model.to(torch.bfloat16).requires_grad_(True)
    score = None
    if eager is not None:  # b over the heads of one attention layer is what a score keeps
        fits = [_quadratic(counts) for counts in eager]
        score = round(_quadratic(eager[0], attended=True)[2] / eager[0][0].heads, 3)
    if math:  # every score kept, like eager attention's: what one keeps is the math kernel's own
        (constant, linear, _), (frozen_constant, frozen, _) = (_quadratic(counts) for counts in causal)
        score = round(_quadratic(causal[0], attended=True)[2] / causal[0][0].heads, 3)
        path = "sdpa_math"
    elif path == "eager":
        if eager is None:
            return None
        (constant, linear, _), (frozen_constant, frozen, _) = fits
    else:
        if causal is None:
            return None
        (constant, linear), (frozen_constant, frozen) = (_linear(counts) for counts in causal)
        if any(_off_line(counts) for counts in causal):
            return None
        path = "sdpa_dense" if causal[0][0].masked else path
    passes = (causal or eager)[0][-1].passes
    fp32 = None if stream is None else round(_linear(stream)[1], 1)
    *counts, shared_inputs = counted
    counts = [None if c is None else round(c, 1) for c in counts]
    return LayerSaved(
        path, round(linear, 1), round(frozen, 1), score, round(max(constant, 0.0)), round(max(frozen_constant, 0.0)),
        None if passes is None else round(passes, 1), fp32, *counts, shared_inputs, compiled,
    )  # fmt: skip


def _linear(counts: list[_Count]) -> tuple[float, float]:
    """(C, a) through the first two lengths."""
    (s1, c1), (s2, c2) = ((s, c.per_token * s) for s, c in zip(TOKENS[:2], counts, strict=False))
    a = (c2 - c1) / (s2 - s1)
    return c1 - a * s1, a


def _off_line(counts: list[_Count]) -> bool:
    """The third length off the line through the first two: the path kept an s x s term."""
    constant, a = _linear(counts)
    s3, c3 = TOKENS[2], counts[2].per_token * TOKENS[2]
    return abs(c3 - (constant + a * s3)) > LINEAR_TOLERANCE * c3


def _quadratic(counts: list[_Count], attended: bool = False) -> tuple[float, float, float]:
    """(C, a, b) through the three lengths, of the mean layer or (`attended`) the attention layers'."""
    per_token = [c.attended if attended else c.per_token for c in counts]
    (s1, s2, s3), (c1, c2, c3) = TOKENS, (p * s for s, p in zip(TOKENS, per_token, strict=True))
    d1, d2 = (c2 - c1) / (s2 - s1), (c3 - c2) / (s3 - s2)
    b = (d2 - d1) / (s3 - s1)
    a = d1 - b * (s1 + s2)
    return c1 - a * s1 - b * s1 * s1, a, b


def _both(model, stack, kernel: str, kind: set[int], share: float | None) -> list[list[_Count]] | None:
    """_counts trained, then frozen; None where either cannot be taken."""
    trained = _counts(model, stack, kernel, True, kind, share)
    frozen = _counts(model, stack, kernel, False, kind, share) if trained is not None else None
    return None if frozen is None else [trained, frozen]


def _counts(
    model, stack, kernel: str, trained: bool, kind: set[int], share: float | None, weights=None
) -> list[_Count] | None:
    """_per_token at each of TOKENS under one kernel; None where any cannot be counted. `weights`: fp32 for a
    full fine-tune's fp32 weights under autocast (its residual stream fp32 too), at the first two lengths only (the
    bf16 count's third has shown the layer linear in its tokens); bf16 where None."""
    counts = []
    for tokens in TOKENS if weights is None else TOKENS[:2]:
        try:
            counts.append(_per_token(model, stack, kernel, trained, tokens, kind, share, weights))
        except Exception:  # an op meta cannot run, a block that needs more than its input: the formula prices it
            return None
        if counts[-1] is None:
            return None
    return counts


class _Count(NamedTuple):
    per_token: float
    """Bytes per token a layer keeps, the mean over the layers the estimate's per-layer terms describe, the first block
    left out where others exist (it also keeps the rotary tables all layers share): the attention layers of the kind;
    of a hybrid (blocks without attention among those run: RecurrentGemma's RG-LRU, Mamba, linear attention, an MLP
    alone), every block, each being one of its layers."""
    heads: int
    """Query heads of one attention layer."""
    masked: bool
    """A mask reached the attention kernel."""
    attended: float
    """per_token over the attention layers alone (what an eager score keeps is theirs: _quadratic)."""
    passes: float | None = None
    """HBM bytes per token of one forward of the layer's memory-bound ops (model.pass_count), the same mean; None
    where not counted (a frozen or eager count, or a length short of the longest)."""
    math: bool = False
    """SDPA took its math kernel (more query heads than key heads, no enable_gqa): every score kept."""


def _per_token(
    model, stack, kernel: str, trained: bool, tokens: int, kind: set[int], share: float | None, weights=None
) -> _Count | None:
    """One forward's count under CUDA's autocast policy (model.cuda_autocast); None where no layer ran attention."""
    import torch

    weights = weights or torch.bfloat16
    model.to(weights).requires_grad_(trained)
    current: list[int | None] = [None]
    attention_layers: dict[int, int] = {}
    masks: list[bool] = []
    maths: list[bool] = []
    autocast = cuda_autocast()
    saved = SavedStorages(model, lambda: current[0], skip=autocast.is_weight_copy)
    hooks = []
    for i, block in enumerate(stack):
        hooks.append(block.register_forward_pre_hook(lambda m, a, i=i: current.__setitem__(0, i)))
        hooks.append(block.register_forward_hook(lambda m, a, o: current.__setitem__(0, None)))

    def attended(heads: int, masked: bool, math: bool) -> None:
        if current[0] is not None:
            attention_layers[current[0]] = heads
            masks.append(masked)
            maths.append(math)

    hidden = model.get_input_embeddings().weight.shape[-1]
    embeds = torch.empty(1, tokens, hidden, device="meta", dtype=weights, requires_grad=True)
    # the memory-bound passes of a trained layer on the SDPA path (the eager path's own softmax is attention's), at
    # the longest length only (LayerSaved.pass_bytes reads that one)
    counting = trained and kernel != "eager" and tokens == TOKENS[-1] and weights == torch.bfloat16
    traffic = counter(lambda: current[0]) if counting else None
    try:
        with (
            stand_ins(attended),
            saved.hooks(),
            autocast,
            traffic if traffic is not None else contextlib.nullcontext(),
        ):
            set_kernel(model, kernel)
            out = decoder(model)(inputs_embeds=embeds, use_cache=False)
        per_layer = saved.by_owner()
        del out
    finally:
        for h in hooks:
            h.remove()
    attended = _past_first(sorted(i for i in attention_layers if i in kind or len(attention_layers) < len(stack)))
    if not attended:
        return None
    # a hybrid's layers of every kind are among the model's num_layers (Nemotron-H's MoE blocks hold no attention)
    other = [i for i in _past_first(range(len(stack))) if i not in attention_layers]
    weight = (share if share is not None else len(attended) / (len(attended) + len(other))) if other else 1.0

    def average(by_block, blocks) -> float:
        return sum(by_block[i] for i in blocks) / len(blocks) / tokens if blocks else 0.0

    def mean(by_block) -> float:
        return weight * average(by_block, attended) + (1 - weight) * average(by_block, other)

    passes = mean(traffic.totals) if traffic is not None else None
    return _Count(
        mean(per_layer), attention_layers[attended[0]], any(masks), average(per_layer, attended), passes, any(maths)
    )


def _past_first(blocks) -> list[int]:
    """The blocks without block 0 where others remain (it keeps what all layers share)."""
    blocks = list(blocks)
    return blocks[1:] if len(blocks) > 1 and blocks[0] == 0 else blocks
