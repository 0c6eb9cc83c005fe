"""How much `probe --compute` measures: the three efforts (--quick, the default, --full), each section's time box and
the grids it walks, with what each took on one H200."""

from __future__ import annotations

from dataclasses import dataclass

from generator.probe import compute_grid as grid


@dataclass(frozen=True)
class Effort:
    """How much `probe --compute` measures: seconds per section (each a time box; what a box cuts is listed under
    "skipped" and `plan --compute-file` takes it from the shipped table, scaled to what was measured:
    generator/estimate/compute_complete.py), and the grid each section walks."""

    name: str
    """quick | standard | full, written to the file as method.effort."""
    gemm_bf16: float
    gemm_fp8: float
    cast: float
    grouped: float
    attention: float
    flex: float
    host: float
    layers: float
    """The eight above: each section's time box in seconds (a row started inside its box runs to its end)."""
    gemm_tokens: tuple[int, ...]
    """GEMM token counts, in the order timed (the box cuts the last)."""
    lora_tokens: tuple[int, ...]
    cast_shapes: int
    """How many of the cast shapes ((8192, hidden), (32768, hidden), (32768, 14336)), from the first."""
    compiled_casts: bool
    """torchao's casts as torch.compile fuses them (10-15 s of compile) or eager."""
    attn_seqs: tuple[int, ...]
    host_compiled: bool
    """Also time the compiled layer's host rows (each compiles); else the eager rows (and Liger's, if the box
    allows), the compiled ones scaled from the shipped table."""
    host_rounds: int
    """Interleaved rounds per host row (generator/probe/compute_host.py ROUNDS for the full probe)."""
    compiled_layers: bool = False
    """Also time the MoE layers compiled as train.py compiles them (generator/probe/compute_layers.py): float8 and
    --compile-layers run them so; each variant compiles (tens of seconds)."""
    host_model: float = 0.0
    """Time box of --model's own host rows (generator/probe/compute_host_model.py), where its layer is not the tiny
    Mistral's; 0: none."""
    attn_widths: tuple[tuple[int, int, int], ...] = ()
    """(query heads, kv heads, head width) layouts timed besides the 128-wide ones (grid.ATTN_WIDTH_LAYOUTS)."""
    layer_sizes: tuple[tuple[int, int], ...] = (grid.LAYER_TOKENS,)
    """(micro-batch, sequence) each MoE layer row is timed at (compute_grid.LAYER_SIZES_FULL for --full)."""
    fp8_layers: bool = False
    """Also time --model's own layers (dense or MoE) with train.py's float8 Linears, compiled, at the first layer
    size (generator/probe/compute_layers.py): the estimate prices that model's float8 layers from them. Each variant
    compiles (on one H100, 10-20 s a row: bench/results/h100-x1-fp8-layer-rows-*-2026-12-06.json)."""


FULL = Effort("full", gemm_bf16=24.0, gemm_fp8=16.0, cast=12.0, grouped=6.0, attention=20.0, flex=36.0, host=150.0,
              layers=150.0, gemm_tokens=grid.CUDA_TOKENS, lora_tokens=grid.LORA_TOKENS, cast_shapes=3,
              compiled_casts=True, attn_seqs=grid.ATTN_SEQS, host_compiled=True, host_rounds=12,
              compiled_layers=True, layer_sizes=grid.LAYER_SIZES_FULL, fp8_layers=True, host_model=120.0,
              attn_widths=grid.ATTN_WIDTH_LAYOUTS)  # fmt: skip
"""--full: every grid (97-150 s on one H200 over six runs, 2026-12-03: host rows 52 s, bf16 GEMMs 20, casts 17, float8
GEMMs 13, flex 11, SDPA 10, MoE layers 5), and since 2026-12-04 the MoE layer rows compiled too (Mixtral's eager and
compiled rows together took 61 s on one H200, bench/results/moe-layers-mixtral-h200-2026-12-04.json; the layer box
grew from 30 to 150 s for them)."""
STANDARD = Effort("standard", gemm_bf16=10.0, gemm_fp8=6.0, cast=3.0, grouped=3.0, attention=7.0, flex=8.0,
                  host=14.0, layers=4.0, gemm_tokens=grid.CUDA_TOKENS_STANDARD, lora_tokens=grid.LORA_TOKENS[:1],
                  cast_shapes=1, compiled_casts=False, attn_seqs=grid.ATTN_SEQS, host_compiled=False,
                  host_rounds=4, host_model=14.0)  # fmt: skip
"""The default, about a minute: the full probe's levels at the shapes a fine-tune's step spends most in (GEMMs at
2,048-32,768 tokens, flex over 1,024-token documents, the eager host rows at a third of the rounds). Its first run
(one H200, 2026-12-03, compute-h200-2026-12-03-standard.json) took 79 s, 89 s from the command line: torch.compile's
casts 15 s and flex's compile 16 s past their boxes, the host rows 17 s at six rounds; the casts are now timed
eager (the compiled ones are completed from the shipped table at this GPU's bandwidth) and the host rows at four.
Two runs of that (2026-12-03, the pair around h200-x1-families-unseen-2026-12-03-b): 60.0 and 54.6 s inside the
probe, 71 and 62 s from the command line; on the fresh machine the first host row (with transformers' import) took
the whole 12 s box, so the LoRA row, whose host floor binds most often, now runs first, in a box of 14 s (not yet
run on a GPU). --model's own host rows (a model whose layer is not Mistral's) have a box of their own, as long as
the Mistral rows' (not yet run on a GPU)."""
QUICK = Effort("quick", gemm_bf16=8.0, gemm_fp8=6.0, cast=3.0, grouped=3.0, attention=5.0, flex=0.0, host=0.0,
               layers=0.0, gemm_tokens=grid.CUDA_TOKENS_QUICK, lora_tokens=grid.LORA_TOKENS[:1], cast_shapes=1,
               compiled_casts=False, attn_seqs=grid.ATTN_SEQS_QUICK, host_compiled=False, host_rounds=0)  # fmt: skip
"""--quick: the GEMM, attention and HBM levels (one H200, 2026-12-03: 12.6 s inside the probe, 18 s from the command
line, compute-h200-2026-12-03-quick-e.json)."""
