"""Float8 training (issue 20): what torchao's float8 Linear changes in step time, memory and FSDP2 traffic.

Measured under train.py on one H200 (bench/results/h200-x1-fp8-2026-12-01-rerun.json; torch 2.11, torchao 0.18.0):
one term, FP8_GEMM_SPEEDUP, is fitted to one row; the casts, memory and FSDP2 terms below come from torchao's source
and are not fitted. REPORT.md scores the rows it was not fitted on. Sources, as installed with accelerate 1.15 and
torchao:
- Which layers run in float8: accelerate's `utils/ao.py` `filter_linear_layers` converts an `nn.Linear` only when both
  its in and out features divide by 16 (`torch._scaled_mm`'s alignment), and `convert_model_to_fp8_ao` skips the
  model's first and last Linear (lm_head) for stability; torchao's float8 README does the same by filter function.
  Embedding, norms, RoPE and attention (SDPA / flex) stay in bf16: they are not Linear layers.
- Tensorwise scaling (torchao `Float8LinearConfig` default recipe, the one the issue measured fastest): each float8
  Linear takes the absolute maximum of its input and of its weight (one reduction pass each), casts both to fp8 in
  forward, and does the same for the output gradient in backward; backward also needs the input and the weight
  transposed in fp8 (torchao saves the high-precision tensors and recasts them).
- FSDP2 float8 all-gather (`enable_fsdp_float8_all_gather`, on by default in accelerate's `AORecipeKwargs`): the
  shard is cast to fp8 before the all-gather, so the gathered Linear weights travel in 1 byte instead of 2.
MFU stays in bf16-equivalent FLOPs (6N + 12*L*h*s over the dense bf16 peak), so fp8 rows compare with bf16 rows.
"""

from __future__ import annotations

from generator.catalog.gpus import find_gpu
from generator.model.types import ModelSpec

PRECISIONS = ("bf16", "fp8")
"""--precision values: bf16 autocast (default) or float8 Linear layers via torchao (train.py --precision fp8)."""

FP8_GEMM_SPEEDUP = 1.76
"""How much faster the float8 Linears' GEMMs run than the same GEMMs in bf16, end to end. The datasheets' peak ratio
is 2.0 (H100/H200 SXM 3,958 fp8 vs 1,979 bf16 sparse TFLOP/s; L40S 1,466 vs 733); fp8 GEMMs sustain a smaller share
of it, and the compiled layer's overheads beyond the modelled casts land here too. Fitted to one row, the full
fine-tune at seq 4096, micro-batch 8, with checkpointing, flex and Liger on one H200 (14,900 tokens/s;
bench/results/h200-x1-fp8-2026-12-01-rerun.json, train.py-g1-ddp-full-s4096-mb8-ckpton-flex-short-liger-fp8);
checked on the rows in bench/holdout.py FP8_VALIDATION_KEYS (seq 8192 with filling documents, LoRA). Hopper only:
Ada and Blackwell inherit it unmeasured; GeForce Ada/Blackwell halve fp8 with fp32 accumulate, not modelled."""

INPUT_CAST_BYTES = 5.0
"""HBM bytes per input element per forward of a float8 Linear: the amax reduction reads bf16 (2), the cast reads it
again (2) and writes fp8 (1). torchao tensorwise scaling; under torch.compile the two passes may fuse (unfitted)."""
GRAD_CAST_BYTES = 5.0
"""The same per output-gradient element in backward (amax read 2, cast read 2 + write 1)."""
INPUT_TRANSPOSE_BYTES = 3.0
"""Per input element in backward: the saved bf16 input recast to fp8 for the weight-gradient GEMM (read 2, write 1)."""
WEIGHT_CAST_BYTES = 5.0 + 3.0
"""Per float8 weight parameter per forward (amax + cast, 5) and its fp8 transpose for the input-gradient GEMM (3)."""


def fp8_supported(gpu_name: str) -> bool:
    """The catalog says the part's tensor cores run fp8 (Hopper, Ada, Blackwell); unknown GPUs are not assumed to."""
    part = find_gpu(gpu_name)
    return part is not None and part.fp8


def fp8_refusal(gpu_name: str) -> str:
    """One line: why fp8 is not offered on this GPU, and what to use instead."""
    part = find_gpu(gpu_name)
    arch = f"{part.name} is {part.architecture}" if part else f"{gpu_name!r} is not in the GPU catalog"
    return (
        f"--precision fp8 needs fp8 tensor cores (Hopper, Ada or Blackwell): {arch}; use --precision bf16 "
        "(or add the part to generator/catalog/gpus.py)"
    )


def _aligned(*dims: int) -> bool:
    return all(d % 16 == 0 for d in dims)


def _layer_linears(model: ModelSpec) -> list[tuple[int, int]]:
    """(in, out) features of one decoder layer's Linears that torchao converts (both divisible by 16). MoE experts:
    the routed ones a token passes through."""
    h, q, kv = model.hidden_size, model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    i = model.intermediate_size
    mlps = max(model.experts_per_token, 1)
    dims = [(h, q), (h, kv), (h, kv), (q, h)] + [(h, i), (h, i), (i, h)] * mlps
    return [d for d in dims if _aligned(*d)]


def fp8_matmul_params(model: ModelSpec) -> int:
    """Active matmul parameters that run in float8: the decoder Linears (lm_head stays bf16, as accelerate's and
    torchao's filters leave it; so does the first Linear accelerate skips, under one layer's q_proj: ignored)."""
    return model.num_layers * sum(a * b for a, b in _layer_linears(model))


def fp8_weight_params(model: ModelSpec) -> int:
    """Stored parameters of the float8 Linears (all experts of an MoE), for casts and the float8 all-gather."""
    layer = _layer_linears(model)
    experts = max(model.num_experts, 1) / max(model.experts_per_token, 1)
    attn, mlp = layer[:4], layer[4:]
    return int(model.num_layers * (sum(a * b for a, b in attn) + experts * sum(a * b for a, b in mlp)))


def cast_bytes_per_token(model: ModelSpec, forward_passes: int, frozen: bool = False) -> float:
    """HBM bytes the float8 casts of activations and gradients move per token per micro-step (weights apart).
    `frozen` (a LoRA base): no weight gradient, so no recast of the input for it (the compiled layer drops it)."""
    linears = _layer_linears(model)
    inputs = sum(a for a, _ in linears) * model.num_layers
    outputs = sum(b for _, b in linears) * model.num_layers
    per_token = forward_passes * INPUT_CAST_BYTES * inputs + GRAD_CAST_BYTES * outputs
    return per_token + (0.0 if frozen else INPUT_TRANSPOSE_BYTES * inputs)


def weight_cast_bytes(model: ModelSpec, forward_passes: int) -> float:
    """HBM bytes of the per-step weight casts (each forward recasts: the weights change every optimizer step)."""
    return fp8_weight_params(model) * (WEIGHT_CAST_BYTES + 5.0 * (forward_passes - 1))


def transient_fp8_bytes(model: ModelSpec) -> float:
    """Float8 copies alive at once: one Linear's fp8 weight and its transpose (the largest), freed after its GEMM.
    Saved activations stay bf16 (torchao saves the high-precision tensors), so no activation term changes."""
    return 2.0 * max((a * b for a, b in _layer_linears(model)), default=0)
