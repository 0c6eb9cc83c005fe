"""Float8 training (issue 20): what torchao's float8 Linear changes in step time, memory and FSDP2 traffic.

Measured under train.py on one H200 (bench/results/h200-x1-fp8-2026-12-01-rerun.json; torch 2.11, torchao 0.18.0).
Step time: the float8 GEMMs and casts are priced from the rate table (`probe --compute`; estimate.compute_time). The
memory and FSDP2 terms below come from torchao's source and are not fitted. Sources, as installed with accelerate
1.15 and torchao:
- Which layers run in float8: train.py's filter (training/precision.py) converts an `nn.Linear` only when both its
  in and out features divide by 16 (`torch._scaled_mm`'s alignment), never lm_head nor a LoRA adapter; the MoE
  experts are not nn.Linear and stay bf16 (estimate.operators lists which GEMMs run in float8).
  Embedding, norms, RoPE and attention (SDPA / flex) stay in bf16: they are not Linear layers.
- Tensorwise scaling (torchao `Float8LinearConfig` default recipe, the one the issue measured fastest): each float8
  Linear takes the absolute maximum of its input and of its weight (one reduction pass each), casts both to fp8 in
  forward, and does the same for the output gradient in backward; backward also needs the input and the weight
  transposed in fp8 (torchao saves the high-precision tensors and recasts them; compiled, inductor's partitioner may
  keep the float8 cast instead: model.compiled_count counts what it keeps).
- FSDP2 float8 all-gather (`enable_fsdp_float8_all_gather`, on by default in accelerate's `AORecipeKwargs`): the
  shard is cast to fp8 before the all-gather, so the gathered Linear weights travel in 1 byte instead of 2.
MFU stays in bf16-equivalent FLOPs (estimate.timing.model_flops_per_token over the dense bf16 peak), so fp8 rows
compare with bf16 rows.
"""

from __future__ import annotations

from generator.catalog.gpus import find_gpu, fp8_aligned
from generator.model.types import ModelSpec

PRECISIONS = ("bf16", "fp8")
"""--precision values: bf16 autocast (default) or float8 Linear layers via torchao (train.py --precision fp8)."""

# Step time (issue 26): the float8 GEMMs run at the rate table's measured float8 rates by shape, and the casts at
# its measured per-element cast rates (estimate.compute_time, estimate.operators.fp8_cast_elements); the former
# FP8_GEMM_SPEEDUP (1.76, fitted to one row) survives only in bench/fit_compute.py's provisional table.


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


def _float8_linears(model: ModelSpec) -> list[tuple[int, int, int]]:
    """(in, out, instances) of the decoder Linears torchao converts (both dims divisible by 16): a meta-sized model's
    own (ModelSpec.layer_linears, less its Conv1D: not nn.Linear), else the config's projections in every layer. MoE
    experts are not among them: transformers 5 holds them as parameters of one module, not nn.Linear, so torchao
    leaves them bf16 (issue 26); the router's width (the expert count) does not divide by 16."""
    if model.layer_linears:
        return [(a, b, c) for n, a, b, c in model.layer_linears if fp8_aligned(a, b) and n not in model.not_linear]
    h, q, kv = model.hidden_size, model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    i = model.intermediate_size
    dims = [(h, q), (h, kv), (h, kv), (q, h)] + ([] if model.num_experts else [(h, i), (h, i), (i, h)])
    return [(a, b, model.num_layers) for a, b in dims if fp8_aligned(a, b)]


def fp8_matmul_params(model: ModelSpec) -> int:
    """Active matmul parameters that run in float8: the decoder Linears (lm_head stays bf16, as accelerate's and
    torchao's filters leave it; so does the first Linear accelerate skips, under one layer's q_proj: ignored)."""
    return sum(a * b * c for a, b, c in _float8_linears(model))


def fp8_weight_params(model: ModelSpec) -> int:
    """Stored parameters of the float8 Linears, for the float8 all-gather (MoE experts stay bf16)."""
    return fp8_matmul_params(model)


def transient_fp8_bytes(model: ModelSpec) -> float:
    """Float8 copies alive at once: one Linear's fp8 weight and its transpose (the largest), freed after its GEMM.
    What the layers save is the compiled block's count with float8 Linears (model.compiled_count: torchao saves the
    high-precision tensors, but the partitioner keeps an input cast to float8 where nothing else needs it), and an fp32
    weight of a float8 Linear has no autocast bf16 copy (activations.activation_terms)."""
    return 2.0 * max((a * b for a, b, _ in _float8_linears(model)), default=0)
