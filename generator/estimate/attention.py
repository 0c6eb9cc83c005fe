"""What each attention kernel computes and holds: the path transformers 5.x sends a batch down, the keys each query
really multiplies, and the mask tensors it materialises. Pure; timing.py prices the work, activations.py the memory.

Paths (transformers/masking_utils.py and integrations/sdpa_attention.py, 5.17-5.24):
- sdpa_dense: SDPA handed a materialised boolean mask [micro-batch, 1, s, s]. transformers builds one whenever
  packing is detected from the position ids (documents shorter than the sequence) or a sliding window does not
  cover it (`_ignore_causal_mask_sdpa`: kv_length >= sliding_window). A mask rules out the flash kernel: the
  memory-efficient kernel computes all s x s scores whatever the mask keeps, and GQA's k/v are repeated per head.
- sdpa_causal: no mask (one document per sequence, no window cut): `is_causal=True`, the flash kernel, the causal
  half of the scores.
- flex: flex_attention over transformers' block mask (128 x 128 tiles): only the tiles the document boundaries and
  the window leave non-empty are computed.
- eager: every score materialised (s x s per head) and a float mask. SDPA's math kernel is priced as eager: torch runs
  it where a class hands SDPA fewer key heads than query heads without enable_gqa (Falcon-7B's multi-query in
  transformers 5.17), counted at sizing (ModelSpec.layer_saved.path sdpa_math).
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

from generator.estimate.scripts import script_facts
from generator.estimate.types import Workload
from generator.model.types import ModelSpec

KERNELS = ("sdpa", "flex", "eager")
"""Workload.attention values (train.py --attn-implementation sdpa | flex_attention | eager)."""
ATTN_IMPLEMENTATION = {"sdpa": "sdpa", "flex": "flex_attention", "eager": "eager"}
"""Workload.attention -> transformers' attn_implementation, the spelling train.py's --attn-implementation, TRL's
--attn_implementation and from_pretrained take."""
FLEX_BLOCK_TOKENS = 128
"""flex_attention's tile (transformers' block mask: 128 x 128)."""


def documents(workload: Workload) -> int:
    """Tokens per document: doc_tokens, or the sequence when None (documents fill each sequence)."""
    return min(workload.doc_tokens or workload.seq_len, workload.seq_len)


def attention_rows(workload: Workload) -> tuple[int, int]:
    """(rows, tokens per row) the attention kernel sees: the micro-batch's sequences, or, where the script flattens
    the micro-batch into one row (ScriptFacts.flattens_micro_batch: TRL's padding-free packing), one row of all
    its tokens whose documents never cross a sequence's bins."""
    if script_facts(workload.script).flattens_micro_batch and workload.micro_batch > 1:
        return 1, workload.micro_batch * workload.seq_len
    return workload.micro_batch, workload.seq_len


def layer_groups(model: ModelSpec) -> tuple[ModelSpec, ...]:
    """The model as each kind of its decoder layers sees it, each with its own layer count: itself where a window
    covers every layer or none; where it covers only some (ModelSpec.partial_window: Gemma-2/3, GPT-OSS), the
    windowed layers and the full-attention ones. Attention time, MFU and what each layer saves (estimate.activations:
    one mask per kind) sum over these."""
    if model.partial_window is None:
        return (model,)
    windowed, window = model.partial_window
    return (
        replace(_share(model, windowed), sliding_window=window, partial_window=None),
        replace(_share(model, model.num_layers - windowed), sliding_window=None, partial_window=None),
    )


def _share(model: ModelSpec, layers: int) -> ModelSpec:
    """The model as `layers` of its decoder layers: the counts of blocks holding each Linear (layer_linears) and
    experts taken in proportion, so a mean over the group's layers is the model's mean (LoRA on a hybrid's own
    Linears was priced 3x in its 2 windowed layers of 6 when they kept the whole model's counts)."""
    share = layers / model.num_layers
    return replace(
        model,
        num_layers=layers,
        layer_linears=tuple((name, a, b, n * share) for name, a, b, n in model.layer_linears),
        expert_layers=model.expert_layers and model.expert_layers * share,
    )


PROBE_ATTENTIONS = ("sdpa", "flex", "eager")
"""The kernel the probe's layer rows run a model's layers with, first that its class takes: SDPA, else flex (Gemma-2,
with its logit softcapping, has no SDPA path), else eager (GPT-OSS's sinks)."""
TRANSFORMERS_NAMES = {"sdpa": "sdpa", "flex": "flex_attention", "eager": "eager"}
"""Workload.attention values as transformers' attn_implementation names them."""


def probe_attention(attentions: tuple[str, ...]) -> str:
    """The attention a layer row of a class taking `attentions` was timed with (the estimate takes it back out at
    that path)."""
    return next((a for a in PROBE_ATTENTIONS if a in attentions), "eager")


def kernel_path_of_count(counted: str) -> str:
    """The path a model's own count (LayerSaved.path) runs SDPA on: sdpa_math, SDPA's math kernel, keeps every score
    as eager attention does and is priced as eager."""
    return "eager" if counted == "sdpa_math" else counted


def kernel_path(model: ModelSpec, workload: Workload) -> str:
    """sdpa_dense | sdpa_causal | flex | eager (see the module docstring)."""
    if workload.attention in ("flex", "eager"):
        return workload.attention
    counted = model.layer_saved.path if model.layer_saved is not None else None
    if counted in ("sdpa_math", "sdpa_dense"):  # the class calls SDPA so (Falcon: the math kernel in 5.17, whose
        return kernel_path_of_count(counted)  # scores are eager's; a mask always built, allow_is_causal_skip=False)
    window = model.sliding_window
    _, row = attention_rows(workload)
    if documents(workload) < row or (window and row >= window):
        return "sdpa_dense"
    return "sdpa_causal"


def counts_math_kernel(model: ModelSpec) -> bool:
    """Whether sizing counted SDPA's math kernel for the model's class (LayerSaved.path sdpa_math)."""
    return model.layer_saved is not None and model.layer_saved.path == "sdpa_math"


def takes_math_kernel(model: ModelSpec, workload: Workload) -> bool:
    """Whether the workload's attention runs SDPA's math kernel: SDPA asked for, on a class counted taking it."""
    return workload.attention == "sdpa" and counts_math_kernel(model)


def rates_path(model: ModelSpec, workload: Workload) -> str:
    """The path whose measured rates price the kernel: kernel_path, except that SDPA's math kernel (counted at sizing,
    sdpa_math) in eager layers is priced from its own rows (`sdpa_math`, scores in fp32), which it runs far below the
    fused kernels' rates; attention_rates.priced_path takes the dense kernel's where the table has none. A compiled
    layer does not run the eager kernel: AOTAutograd traces its decomposition and inductor rewrites it (its SDPA pattern
    matcher, torch/_inductor/fx_passes/fuse_attention.py, can put a fused kernel back), so that stays at the dense rate,
    an upper bound (Falcon's compiled LoRA under transformers 5.17 ran 7,995 tokens/s, the math rows price 4,470 and the
    dense ones 14,644)."""
    if takes_math_kernel(model, workload) and not workload.layers_compiled:
        return "sdpa_math"
    return kernel_path(model, workload)


def _mean_reach(doc: int, window: int | None) -> float:
    """Mean keys a query reaches inside its document, under a sliding window: mean over p < doc of min(p, window)."""
    if not window or doc <= window:
        return doc / 2
    return window - window * window / (2 * doc)


def useful_keys_per_query(model: ModelSpec, workload: Workload) -> float:
    """Keys the mask keeps per query (causal, inside its document and the window), whatever the kernel computes:
    the attention work MFU counts (estimate.timing.model_flops_per_token)."""
    return _mean_reach(documents(workload), model.sliding_window)


@cache
def flex_tile_keys(seq: int, doc: int, window: int | None = None) -> float:
    """Mean keys per query over the 128 x 128 tiles a causal block mask of `doc`-token documents (and a sliding
    `window`) keeps, counted as the kernel computes them (a kept tile is computed whole): a query tile reaches back to
    the tile holding the earliest key its first query sees (its document's start, or the window's). The probe's flex
    rows carry the same count, so a rate read from them prices the same work (generator/probe/compute_attention.py)."""
    b = FLEX_BLOCK_TOKENS
    blocks = max(seq // b, 1)
    kept = 0
    for qb in range(blocks):
        first = qb * b
        earliest = max(first // doc * doc, first - window + 1 if window else 0, 0)
        kept += qb - earliest // b + 1
    return kept * b / blocks


def keys_per_query(model: ModelSpec, workload: Workload) -> float:
    """Keys each query multiplies (QK^T and AV), averaged over the sequence, on the chosen kernel's path.

    Dense SDPA and eager compute every score of the s x s square; the flash path the causal half; flex the tiles it
    keeps (flex_tile_keys: inside each document and the window)."""
    _, s = attention_rows(workload)
    path = kernel_path(model, workload)
    if path in ("sdpa_dense", "eager"):
        return float(s)
    reach = _mean_reach(documents(workload), model.sliding_window)
    if path == "sdpa_causal":
        return reach
    return min(float(s), flex_tile_keys(s, documents(workload), model.sliding_window))


def attention_flops_per_token(model: ModelSpec, workload: Workload, keys=keys_per_query) -> float:
    """FLOPs of QK^T and AV per token over every layer kind (layer_groups), forward (4 per key and query channel) and
    backward (8), for `keys` per query: keys_per_query, what the kernel computes; useful_keys_per_query, the keys the
    mask keeps (MFU's count, estimate.timing.model_flops_per_token)."""
    return sum(12.0 * g.num_layers * g.num_heads * g.head_dim * keys(g, workload) for g in layer_groups(model))


def mask_bytes(model: ModelSpec, workload: Workload) -> tuple[float, float]:
    """(held, per_layer): bytes of the mask built once per forward and kept through backward (every checkpointed
    layer takes it as an input), and of what each attention call derives from it and saves for its backward.

    Dense SDPA: a bool [mb, 1, s, s] mask; torch converts it per call to an additive bias in the query dtype (bf16)
    that the memory-efficient kernel's backward reads again. Eager: a bf16 float mask, and per layer what each head
    keeps per score (eager_score_bytes). flex and the flash path hold no s x s tensor."""
    rows, length = attention_rows(workload)
    s2 = float(length) ** 2 * rows
    path = kernel_path(model, workload)
    if path == "sdpa_dense":
        return s2, 2.0 * s2
    if path == "eager":
        return 2.0 * s2, eager_score_bytes(model) * s2 * model.num_heads
    return 0.0, 0.0


EAGER_SCORE_BYTES = 6.0
"""Bytes transformers' eager_attention_forward keeps per score and head: `softmax(..., dtype=torch.float32)` keeps its
fp32 output for its backward (4) and the AV matmul its bf16 copy (2). Counted on the meta device for Llama's layer
(model.saved_count: 6.0); a model's own count replaces it (Gemma-2's softcapping keeps a tanh output too: 7.9)."""


def eager_score_bytes(model: ModelSpec) -> float:
    """EAGER_SCORE_BYTES, or the model's own count (ModelSpec.layer_saved)."""
    counted = model.layer_saved
    return counted.score_bytes if counted is not None and counted.score_bytes is not None else EAGER_SCORE_BYTES
