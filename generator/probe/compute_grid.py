"""What `probe --compute` measures: the GEMM, grouped-GEMM and attention shapes, without torch.

A Linear y = x @ W^T with x [M tokens, K in] and W [N out, K] runs three GEMMs per training step, each 2*M*K*N FLOPs:
forward (M, K, N), the input gradient dX = dY @ W (M, N, K) and the weight gradient dW = dY^T @ X (N, M, K); the
operand layouts differ (transposes), so each is timed in its own layout. The default grid is the union of the
bundled presets' Linear widths (q/k/v/o with the real head and kv-head widths, gate/up/down, lm_head over the real
vocabulary, LoRA's rank-r pair) at a few token counts; --model adds that model's exact widths.
"""

from __future__ import annotations

from dataclasses import dataclass

from generator.estimate.operators import linear_shapes
from generator.model.types import ModelSpec

CUDA_TOKENS = (8192, 4096, 32768, 2048, 16384, 1024)
"""Token counts M of the GEMM grid on a GPU, in the order measured (a time box cuts the last token count, never a
model): seq 4096 x micro-batch 1 and 2 first; the rate is flat beyond ~32k rows on an H100/H200. 1,024 last (since
2026-12-05): below the smallest measured count the table keeps a call's time, so without it a 1,024 x 1 step's GEMMs
were priced as a 2,048-token step's (bench/scripts/small_gemms.py times it for the shipped table)."""
CUDA_TOKENS_STANDARD = (8192, 2048, 32768)
"""The default probe's: a 4,096 x 2 step, the short host-bound steps, and where the rate is flat; the completion
(generator/estimate/compute_complete.py) scales the shipped table's rows at the others."""
CUDA_TOKENS_QUICK = (8192,)
CPU_TOKENS = (64, 256)
"""CPU mode: tiny sizes, for tests of the probe's plumbing."""
LORA_RANKS = (8, 16, 64)
LORA_TOKENS = (8192, 32768, 2048)
"""LoRA's rank-r pairs: 2,048 last (since 2026-12-05), for the short steps' adapters (as CUDA_TOKENS' 1,024)."""
ATTN_LAYOUTS = ((32, 8), (32, 32), (28, 4), (40, 40))
"""(query heads, kv heads) at head_dim 128: Mistral/Llama-3, Llama-2-7B, Qwen2.5-7B, Llama-2-13B."""
LAYER_TOKENS = (2, 4096)
"""(micro-batch, sequence) of a whole MoE layer row (compute_layers): 8,192 tokens, as the grouped GEMM rows."""
LAYER_SIZES_FULL = (LAYER_TOKENS, (1, 4096))
"""--full (and bench/scripts/moe_layers.py) also time each layer at 4,096 tokens: the estimator reads a line through
two sizes (compute_time._layers_s), and an MoE layer with many narrow experts has a part that does not shrink with
the tokens (Qwen3-30B-A3B: 128 experts, 256 routed tokens each at 4,096; priced from the 8,192-token row alone its
LoRA cells at 4,096 x 1 read +8% to +10%, h200-x1-families-qwen3moe-2026-12-04.json)."""
ATTN_WIDTH_LAYOUTS = ((16, 8, 256), (64, 8, 64))
"""--full's layouts at other head widths (query heads, kv heads, width): Gemma-2-9B's 256 and GPT-OSS's 64; the
estimator reads a width's rows for the widths nearest it (estimate.attention_rates.attention_tflops)."""
ATTN_SEQS = (2048, 4096, 8192, 16384)
ATTN_SEQS_QUICK = (4096, 16384)
ATTN_TOKENS = 16384
"""Tokens per attention call (micro-batch = ATTN_TOKENS // seq, at least 1)."""
FLEX_DOC_TOKENS = 1024
"""Document length of the flex block-mask rows (packed short documents)."""
FLEX_SHORT_DOC_TOKENS = 128
"""Chat-sized documents: every 128-token tile partly masked, the rate falls to 96-155 TFLOP/s (one H200,
bench/results/flex-short-docs-h200-2026-12-02.json: 54-512-token documents), far below the 1,024-token rows'."""


@dataclass(frozen=True)
class Gemm:
    m: int
    """Rows of the output (tokens for forward / dX; out features for dW)."""
    k: int
    """Contraction width."""
    n: int
    """Columns of the output."""
    op: str
    """fwd (x @ W^T) | dgrad (dY @ W) | wgrad (dY^T @ X)."""

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.k * self.n


def linear_gemms(tokens: int, k_in: int, n_out: int) -> list[Gemm]:
    """The three GEMMs of one Linear (K in -> N out) over `tokens` rows."""
    return [Gemm(*shape) for shape in linear_shapes(tokens, k_in, n_out)]


def model_widths(model: ModelSpec) -> list[tuple[int, int]]:
    """(in, out) features of a model's dense Linears: q, k/v, o, gate/up, down, lm_head (routed experts excluded:
    they run as grouped GEMMs, see model_experts)."""
    h, q, kv = model.hidden_size, model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    i = model.intermediate_size
    widths = [(h, q), (h, kv), (q, h), (h, model.vocab_size)]
    if not model.num_experts:
        widths += [(h, i), (i, h)]
    return widths


def model_experts(model: ModelSpec) -> list[tuple[int, int, int, int]]:
    """(experts, top_k, in, out) of the routed expert GEMMs (gate/up fused 2i wide, down), if any."""
    if not model.num_experts:
        return []
    h, i, e, k = model.hidden_size, model.intermediate_size, model.num_experts, max(model.experts_per_token, 1)
    return [(e, k, h, 2 * i), (e, k, i, h)]


def preset_models() -> list[ModelSpec]:
    from generator.model import load_model
    from generator.model.presets import PRESETS

    return [load_model(name) for name in PRESETS]


def dense_grid(models: list[ModelSpec], tokens: tuple[int, ...]) -> list[Gemm]:
    """Every dense Linear width of `models` at every token count, three GEMMs each, deduplicated; token count by
    token count (in `tokens` order), so a time box that cuts the tail loses a token count, not a model."""
    seen: dict[tuple, Gemm] = {}
    for m in tokens:
        for model in models:
            for k_in, n_out in model_widths(model):
                for g in linear_gemms(m, k_in, n_out):
                    seen.setdefault((g.m, g.k, g.n, g.op), g)
    return list(seen.values())


def lora_grid(hidden: int, ranks: tuple[int, ...], tokens: tuple[int, ...]) -> list[Gemm]:
    """LoRA's rank-r GEMMs on a hidden-wide Linear: A (hidden -> r) and B (r -> hidden), forward and dX (a frozen
    base still trains the adapters, so their weight gradients run too)."""
    out: list[Gemm] = []
    for m in tokens:
        for r in ranks:
            out += linear_gemms(m, hidden, r) + linear_gemms(m, r, hidden)
    return out


def cpu_grid() -> list[Gemm]:
    """Tiny shapes for --device cpu."""
    out: list[Gemm] = []
    for m in CPU_TOKENS:
        for k_in, n_out in ((128, 128), (128, 32), (128, 384), (384, 128)):
            out += linear_gemms(m, k_in, n_out)
    return out
