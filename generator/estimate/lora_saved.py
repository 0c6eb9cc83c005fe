"""What LoRA and QLoRA (peft 0.21) change in what a decoder layer keeps for backward, per token: the frozen base's
inputs no longer kept, the adapters' own input copies and rank-r outputs, dropout's masks."""

from __future__ import annotations

from generator.estimate.layer_saved import head_norm_bytes, o_proj_input_bytes
from generator.estimate.lora_targets import (
    LORA_TARGETS,
    adapted_input_width,
    adapted_modules,
    adapted_targets,
    linear_dims,
    moe_mlp_linears_adapted,
    own_linears_adapted,
    target_layers,
)
from generator.estimate.moe import shared_mlp
from generator.model.types import ModelSpec

# Dropout's saved mask, bytes per element: CUDA's native_dropout keeps a bool mask (ATen Dropout.cu allocates it as
# kBool); the CPU kernel keeps a mask in the input's dtype instead (tests/test_estimate_lora_saved.py counts that).
DROPOUT_MASK_BYTES = 1


def lora_saved_delta_per_token(
    model: ModelSpec,
    r: int,
    lora_r: int,
    liger: bool = False,
    path: str = "sdpa_causal",
    compiled: bool = False,
    targets: tuple[str, ...] = LORA_TARGETS,
    dropout: float = 0.0,
) -> float:
    """What LoRA / QLoRA (peft 0.21) keep per token and layer beyond layer_saved_bytes_per_token (may be negative).

    The base is frozen, so a base linear keeps no input (autograd saves mm's input only for the weight's gradient;
    bitsandbytes' 4-bit matmul the same) and RMSNorm's `weight *` keeps no normalised tensor (r h per norm, Liger's
    norm keeps its input anyway). Instead each adapted linear (peft/tuners/lora/layer.py 1100-1102, bnb.py 546-549)
    casts its input to the adapters' fp32 (`x.to`, which keeps nothing) and runs lora_A on it under autocast, which
    casts it back to a fresh bf16 copy that lora_A keeps (2 x in_features per adapted module: q, k and v each keep
    their own copy of one norm output, gate and up of the other), and lora_B keeps lora_A's bf16 output (2 lora_r);
    the scaling multiply by a Python float and the adds keep nothing, dropout is off.
    CPU count (tests/test_estimate_lora_saved.py: a 4-layer Mistral, h 256, F 896, GQA 8/2, seq 512, r 16, bf16, a
    window mask): 14,600 bytes per token and layer besides weights and the mask bias; the formula with this term
    14,560 (the rest: SDPA's fp32 log-sum-exp and RMSNorm's rstd), without it 13,312. An MoE's routed experts are not
    adapted: its attention's q, k, v and o are, and the Linears the MLP names reach (a shared expert's gate, up and
    down: lora_targets.moe_mlp_linears_adapted; Qwen2-MoE's counted in tests/test_estimate_lora_own_linears.py).
    `compiled` (each decoder layer under torch.compile, as fp8 runs): the casts are traced, so the graph saves one bf16
    copy per distinct input, not one per adapter: q, k and v share one, gate and up another (2 x 3h bytes per token
    and layer fewer; measured 12.5 GB less at 16,384 tokens on Mistral-7B, the formula 12.9: bench/REPORT.md).
    `targets`: the adapted projections (Workload.lora_targets). `dropout` > 0 (TRL's CLI default 0.05): peft runs
    `lora_A(dropout(x))` on each adapter's own fp32 copy of the input, and dropout keeps its bool mask (1 byte per
    input element) for backward; the dropped tensor itself is what lora_A's bf16 copy is made from. On an
    architecture beyond the llama names, all-linear adapts its own Linears (lora_targets.own_linears_adapted: one copy
    for a fused qkv_proj, none for a gate it does not have); compiled, those the forward hands one tensor keep one
    copy (LayerSaved.shared_inputs, found at sizing: Phi's q, k, v and fc1, StarCoder2's q, k and v). On one H200
    (h200-x1-families-layernorm-2026-12-05.json) Phi's and StarCoder2's float8 all-linear LoRA kept 12.0 KB a token
    and layer less than one copy each priced: 3 x 2h and 2 x 2h, what the groups share."""
    h, f = model.hidden_size, model.intermediate_size
    # compiled, adapters handed one tensor keep one copy of it (each dropout makes its own tensor)
    sharing = compiled and dropout == 0
    if own_linears_adapted(model, targets):  # peft's all-linear on the model's own Linears
        copy_of = _input_copy_of(model) if sharing else {}
        modules = adapted_modules(model, targets)
        copies = {copy_of.get(name, name): 2 * a * n for name, a, _, n in modules}
        adapted = (sum(copies.values()) + sum(2 * lora_r * n for *_, n in modules)) / model.num_layers
    else:
        # each target in the share of layers that hold it (a hybrid's attention projections: its attention layers)
        inputs = {t: d[0] * target_layers(model, t) / model.num_layers for t, d in linear_dims(model).items()}
        adapted_here = adapted_targets(model, targets)
        copies = {_target_copy(model, t, sharing): inputs[t] for t in adapted_here}
        adapted = sum(2 * w for w in copies.values())
        adapted += 2 * lora_r * sum(target_layers(model, t) for t in adapted_here) / model.num_layers
    if dropout > 0:  # one mask per adapter (each applies its own dropout), shared inputs or not
        adapted += DROPOUT_MASK_BYTES * adapted_input_width(model, targets)
    # The inputs layer_saved_bytes_per_token already counts once each (a trained linear keeps them), now adapters' own.
    # An MoE's frozen router keeps no input either (the MLP norm's output, 2h); its experts' own terms are moe.py's.
    counted = 2 * h + o_proj_input_bytes(model, path) + 2 * h + (0 if model.num_experts else 2 * f)
    shared, _ = shared_mlp(model)
    if shared:  # its frozen down keeps none
        counted += 2 * shared
    # the MoE's Linears peft adapts by the MLP names (a shared expert's gate, up, down), each keeping its input copy
    # (gate and up one between them, compiled) in the share of layers holding it, and lora_A's output
    kept: dict[tuple[str, int], float] = {}
    for name, a, _, n in moe_mlp_linears_adapted(model, targets):
        copy = _target_copy(model, name.rsplit(".", 1)[-1].removesuffix("_proj"), sharing, counted=False)
        kept[(copy, n)] = 2 * a * n / model.num_layers
        adapted += 2 * lora_r * n / model.num_layers
    adapted += sum(kept.values())
    frozen_norms = 0 if liger else 2 * r * h
    frozen_norms += head_norm_bytes(model, liger) - head_norm_bytes(model, liger, frozen=True)
    return float(adapted - counted - frozen_norms)


LLAMA_SHARED_INPUTS = {"k": "q", "v": "q", "up": "gate"}
"""The llama layer's projections handed one tensor (q, k and v the attention norm's output; gate and up the MLP
norm's), where sizing found no groups of the model's own (LayerSaved.shared_inputs)."""


def _input_copy_of(model: ModelSpec) -> dict[str, str]:
    """{GEMM module name: the first of its group} for the groups sizing found handed one tensor
    (LayerSaved.shared_inputs); empty without a count."""
    groups = model.layer_saved.shared_inputs if model.layer_saved is not None else ()
    return {name: group[0] for group in groups for name in group}


def _target_copy(model: ModelSpec, target: str, sharing: bool, counted: bool = True) -> str:
    """Which copy of its input an adapter on llama-named `target` keeps under compile: the target itself, or the first
    of the projections handed the same tensor (the model's counted groups: Cohere's q, k, v, gate and up share its one
    norm's output; else LLAMA_SHARED_INPUTS)."""
    if not sharing:
        return target
    by_leaf = {name.rsplit(".", 1)[-1]: first for name, first in (_input_copy_of(model) if counted else {}).items()}
    return by_leaf.get(f"{target}_proj") or LLAMA_SHARED_INPUTS.get(target, target)
