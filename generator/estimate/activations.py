"""Activation memory of a llama-family decoder under SDPA, from the tensors autograd saves (transformers 5.x source).

Per token and decoder layer (h hidden, q = heads x head_dim, kv = kv_heads x head_dim, F intermediate, r = bytes of
the residual stream: 2 when the model is bf16, 4 when fp32 weights run under bf16 autocast):
- each RMSNorm (MistralRMSNorm.forward): the fp32 upcast kept by pow/mul (4h; for r = 4 the input itself), the
  normalised tensor in the input dtype kept by `weight *` (r h), and its bf16 output kept by the next linear (2h);
- attention: rotated q (2q), k and v (2kv each) and the output (2q) kept by SDPA (flash / mem-efficient: no s^2 term,
  GQA passed through `enable_gqa` when there is no mask), the contiguous transposed output kept by o_proj (2q). With a
  mask (dense SDPA, eager) transformers repeats k and v per query head first (sdpa_attention.py 42-51, 118-127), and
  the kernel keeps the repeated copies: 2q each instead of 2kv. SDPA's kernels write their output [b, s, heads, d]
  and return a transposed view, so transformers' `.transpose(1, 2).contiguous()` copies nothing and o_proj keeps the
  tensor SDPA keeps (one 2q, not two); eager's matmul output is a fresh [b, heads, s, d] that nothing keeps, and its
  copy is o_proj's (its scores: attention.mask_bytes);
- SwiGLU MLP: gate output (kept by silu), silu output and up output (kept by the product), the product (kept by
  down_proj): 8F. MoE: the routed experts, router and dispatch instead (generator/estimate/moe.py).
The loss (estimate.loss): while it is computed, the bf16 logits, their fp32 upcast (`logits.float()` in
ForCausalLMLoss) and the log-softmax the cross-entropy keeps; through backward, the logits Accelerate returns (fp32
after convert_outputs_to_fp32; bf16 under DeepSpeed), and at its start the log-softmax with its two fp32 gradients.
Liger's fused linear cross-entropy materialises none of it.
LoRA / QLoRA (peft 0.21) change what the layer keeps: see lora_saved_delta_per_token.
A model sized on the meta device carries its own layer's count (ModelSpec.layer_saved): what it keeps beyond this
formula at the counted path (another MLP, norm or projection layout, dropout) is added on every path and lever
(estimate.own_layer.own_layer_delta).
Attention masks (attention.mask_bytes): dense SDPA's bool mask is held from the forward through backward, and each
attention call's bf16 bias lives with that layer's saved tensors (one layer under checkpointing, all without).
"""

from __future__ import annotations

from generator.catalog import strategies as catalog
from generator.catalog.peft_moe import mlp_names_reach_linears
from generator.estimate.attention import kernel_path, kernel_path_of_count, layer_groups, mask_bytes
from generator.estimate.loss import LOSS_BACKWARD_BYTES, LOSS_FORWARD_BYTES, fused_head_bytes, logits_kept_bytes
from generator.estimate.moe import (
    backward_transient_routes,
    expert_params,
    mlp_element_bytes,
    moe_saved_bytes_per_token,
    shared_mlp,
)
from generator.estimate.own_layer import compiled_count, counted_stream, fused_qkv_bytes, own_layer_delta
from generator.estimate.precision import fp8_matmul_params
from generator.estimate.scripts import liger_fused_loss, liger_kernels, script_facts
from generator.estimate.states import (
    LORA_TARGETS,
    adapted_input_width,
    adapted_modules,
    adapted_targets,
    linear_dims,
    own_linears_adapted,
    qlora_kept_bytes,
    target_layers,
)
from generator.estimate.types import Workload
from generator.model.types import ModelSpec

# Gradient buffers alive at once inside one layer's backward: at the SwiGLU product, d(silu out) and d(up) (2F each)
# beside the incoming gradient; the attention side is smaller. Derived from the op graph, not measured.
BACKWARD_TRANSIENT_F_BYTES = 4.0
# An adapted down_proj's backward on a bf16 base under autocast, per token and F: lora_A's bf16 input gradient and
# its fp32 cast back to the adapters' dtype, and with dropout dropout's fp32 gradient beside that cast, before the
# sum reaches the base's input gradient. Counted on the CPU by what autograd allocates
# (tests/test_estimate_lora_transient.py: 6.0 and 8.0 bytes, the frozen base alone about 2); larger than the SwiGLU
# product's, so it sets the layer's backward peak. TRL's all-linear LoRA at 8,192 tokens read -5.4% allocated
# before, -3.1% with it; no row was fitted.
LORA_DOWN_TRANSIENT_F_BYTES = {False: 6.0, True: 8.0}  # keyed by dropout > 0
# Dropout's saved mask, bytes per element: CUDA's native_dropout keeps a bool mask (ATen Dropout.cu allocates it as
# kBool); the CPU kernel keeps a mask in the input's dtype instead (tests/test_estimate_lora_saved.py counts that).
DROPOUT_MASK_BYTES = 1


def residual_bytes(workload: Workload, strategy: str) -> int:
    """Bytes per element of the residual stream: fp32 when fp32 weights run under autocast outside DeepSpeed, and
    under QLoRA whenever its unquantised embeddings are fp32 (states.qlora_kept_bytes: the stream starts fp32 and
    autocast keeps it)."""
    if workload.method == "qlora":
        return qlora_kept_bytes(workload)
    return 4 if workload.load_dtype == "fp32" and catalog.strategy(strategy).framework == "ddp" else 2


def layer_saved_bytes_per_token(
    model: ModelSpec,
    r: int,
    liger: bool = False,
    path: str = "sdpa_causal",
    method: str = "full",
    compiled: bool = False,
) -> float:
    """Bytes one decoder layer keeps for backward, per token (see module docstring).

    Liger's RMSNorm keeps only its input (+ per-row rstd) and its SwiGLU only gate and up outputs (silu recomputed).
    path: attention.kernel_path's answer (which k/v the kernel keeps, whether o_proj's input is SDPA's own output).
    method: what an MoE's experts keep depends on whether they train (moe.moe_saved_bytes_per_token); compiled: the
    layer runs under torch.compile (the experts recompute their activation, moe.moe_saved_bytes_per_token)."""
    h = model.hidden_size
    q = model.num_heads * model.head_dim
    kv = q if path in ("sdpa_dense", "eager") else model.num_kv_heads * model.head_dim
    f = model.intermediate_size
    norms = 2 * ((r * h if liger else 4 * h + r * h) + 2 * h) + head_norm_bytes(model, liger)
    # eager's AV product is not kept (only o_proj's contiguous copy of it); a kernel keeps its output
    attention = (2 if path == "eager" else 4) * q + 4 * kv + o_proj_input_bytes(model, path)
    attention += fused_qkv_bytes(model, path)
    # gate and up outputs (and, without Liger, the activation between them) in the MLP's element size, the product
    # kept by down_proj in bf16 (a frozen base's down keeps none: lora_saved_delta_per_token takes it back)
    mlp_f = (2 if liger else 3) * f * mlp_element_bytes(method, r) + 2 * f
    mlp = mlp_f if not model.num_experts else moe_saved_bytes_per_token(model, method, r, compiled)
    shared, gated = shared_mlp(model)
    if shared:  # a dense SwiGLU beside the experts keeps what a dense MLP does; a gated one its output and the gate
        mlp += 3 * shared * mlp_element_bytes(method, r) + 2 * shared + (2 * h + 2 if gated else 0)
    return float(norms + attention + mlp)


def head_norm_bytes(model: ModelSpec, liger: bool, frozen: bool = False) -> int:
    """Bytes per token q_norm and k_norm keep (ModelSpec.qk_norm), over q_proj's and k_proj's bf16 outputs, whose raw
    values nothing else keeps (RoPE's multiplies by cos and sin keep only those): the fp32 upcast (4) and, where the
    norm's weight trains, the normalised bf16 tensor `weight *` keeps (2); a fused norm (Liger's, or inductor's under
    a compiled layer) keeps its bf16 input instead (2). k_norm acts before k is repeated for the query heads."""
    if not model.qk_norm:
        return 0
    width = (model.num_heads + model.num_kv_heads) * model.head_dim
    return 2 * width if liger else (4 if frozen else 6) * width


def o_proj_input_bytes(model: ModelSpec, path: str) -> int:
    """Bytes per token o_proj's input adds beside the attention output the kernel keeps: none under SDPA (the same
    storage, see the module docstring); a bf16 copy under eager and flex (flex not checked against a count)."""
    return 0 if path.startswith("sdpa") else 2 * model.num_heads * model.head_dim


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
    14,560 (the rest: SDPA's fp32 log-sum-exp and RMSNorm's rstd), without it 13,312. MoE experts are not adapted
    (only q, k, v and o count there).
    `compiled` (each decoder layer under torch.compile, as fp8 runs): the casts are traced, so the graph saves one bf16
    copy per distinct input, not one per adapter: q, k and v share one, gate and up another (2 x 3h bytes per token
    and layer fewer; measured 12.5 GB less at 16,384 tokens on Mistral-7B, the formula 12.9: bench/REPORT.md).
    `targets`: the adapted projections (Workload.lora_targets). `dropout` > 0 (TRL's CLI default 0.05): peft runs
    `lora_A(dropout(x))` on each adapter's own fp32 copy of the input, and dropout keeps its bool mask (1 byte per
    input element) for backward; the dropped tensor itself is what lora_A's bf16 copy is made from. On an
    architecture beyond the llama names, all-linear adapts its own Linears (states.own_linears_adapted: one copy
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
    if shared and mlp_names_reach_linears(model.model_type):  # peft adapts a shared expert's gate, up, down by name
        mlp = {"gate": h, "up": h, "down": shared}
        kept = {_target_copy(model, t, sharing, counted=False): mlp[t] for t in ("gate", "up", "down") if t in targets}
        adapted += sum(2 * w for w in kept.values()) + 2 * lora_r * sum(t in targets for t in mlp)
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


def _transient_f_bytes(model: ModelSpec, workload: Workload, residual: int) -> float:
    """Bytes per token and F of one layer's backward transient (BACKWARD_TRANSIENT_F_BYTES, or an adapted down_proj's
    on a bf16 base: LORA_DOWN_TRANSIENT_F_BYTES; an MoE's experts are not adapted)."""
    lora_down = workload.method == "lora" and residual == 2 and not model.num_experts
    if lora_down and "down" in adapted_targets(model, workload.lora_targets):
        return max(BACKWARD_TRANSIENT_F_BYTES, LORA_DOWN_TRANSIENT_F_BYTES[workload.lora_dropout > 0])
    return BACKWARD_TRANSIENT_F_BYTES


def _expert_casts(model: ModelSpec, workload: Workload) -> tuple[bool, bool]:
    """(alive at the loss, alive in a layer's backward) for the bf16 copies of fp32 MoE experts. Only train.py makes
    them (training/moe.py casts per forward: the other scripts run fp32 experts, no copy); they are not autocast's
    cache, so under checkpointing each layer's copy dies with its forward and only the recomputed one is alive in
    that layer's backward; without checkpointing the grouped GEMMs keep them for the input gradient."""
    if not model.num_experts:
        return True, True
    casts = workload.script == "train.py"
    return casts and not workload.grad_checkpointing, casts


def _layer_bytes(model: ModelSpec, workload: Workload, r: float, liger: bool) -> float:
    """Bytes one decoder layer saves per token on the model's attention path, LoRA's extra tensors included.

    A compiled layer (fp8, --compile-layers) keeps what Liger's RMSNorm and SwiGLU keep, with or without --liger:
    inductor's partitioner saves a norm's input and recomputes its fp32 upcast and normalised tensor, and saves
    gate and up and recomputes the activation between them (moe.py: an expert's the same). CUDA memory history at
    the peak of one step (bench/scripts/memhist.py, bench/results/memhist-h200-2026-12-03.json): Mixtral-8x7B cut
    to 8 layers, LoRA in float8 without Liger, 184,448 bytes per token and layer alive (the eager shapes: 258,264;
    these: 184,536); Llama-3-8B LoRA in float8 with Liger (its loss only under compile), 147,584 (these: 147,680)."""
    path = kernel_path(model, workload)
    compiled = workload.layers_compiled
    shapes = liger or compiled
    per_token = layer_saved_bytes_per_token(model, r, shapes, path, workload.method, compiled)
    full = workload.method == "full"
    tokens = workload.seq_len * workload.micro_batch
    fp8 = workload.precision == "fp8" and workload.method != "qlora"
    formula = _formula_as_counted(model, full, r, compiled)
    per_token += own_layer_delta(model, full, shapes, r, formula, tokens, compiled, fp8)
    if not full:
        per_token += lora_saved_delta_per_token(
            model, r, workload.lora_r, shapes, path, compiled, workload.lora_targets, workload.lora_dropout,
        )  # fmt: skip
    return max(per_token, 0.0)


def _formula_as_counted(model: ModelSpec, full: bool, r: int = 2, compiled: bool = False) -> float | None:
    """What the formula prices for the layer ModelSpec.layer_saved counted (its path, its stream: bf16, or fp32 for a
    full fine-tune where own_layer.counted_stream says so, eager, no Liger; a frozen base without adapters for LoRA),
    to set against the count; None where there is no count. `compiled`: against the compiled block's count where there
    is one (own_layer.compiled_count), priced as compiled."""
    counted = model.layer_saved
    if counted is None:
        return None
    method = "full" if full else "lora"
    path = kernel_path_of_count(counted.path)
    if compiled and compiled_count(model, full, r) is not None:
        at = layer_saved_bytes_per_token(model, counted_stream(model, full, r, True), True, path, method, True)
        return at if full else at + lora_saved_delta_per_token(model, 2, 0, True, path, True, targets=())
    at = layer_saved_bytes_per_token(model, counted_stream(model, full, r), False, path, method)
    return at if full else at + lora_saved_delta_per_token(model, 2, 0, False, path, targets=())


def activation_terms(model: ModelSpec, workload: Workload, strategy: str) -> dict[str, dict[str, float]]:
    """{phase: {term: bytes}} for activations, the loss and autocast weight copies (see states.PHASES)."""
    tokens = workload.seq_len * workload.micro_batch
    r = residual_bytes(workload, strategy)
    liger, liger_loss = liger_kernels(workload), liger_fused_loss(workload)
    h, layers = model.hidden_size, model.num_layers
    # each kind of decoder layer (attention.layer_groups: windowed and full ones where a window covers only some)
    # saves what its own attention path keeps; the model holds one mask per kind
    groups = [(g.num_layers, _layer_bytes(g, workload, r, liger) * tokens, mask_bytes(g, workload))
              for g in layer_groups(model)]  # fmt: skip
    per_layer = max(saved for _, saved, _ in groups)  # the one layer alive at a time (recompute, backward)
    all_layers = sum(n * saved for n, saved, _ in groups)
    kept = logits_kept_bytes(workload, strategy) * model.vocab_size * tokens
    loss_fwd = 0.0 if liger_loss else LOSS_FORWARD_BYTES * model.vocab_size * tokens
    loss_bwd = 0.0 if liger_loss else LOSS_BACKWARD_BYTES * model.vocab_size * tokens
    if script_facts(workload.script).fused_lm_head:  # no logits kept: the loss's terms are the fused head's
        kept, (loss_fwd, loss_bwd) = 0.0, fused_head_bytes(model, workload)
    transient = (
        _transient_f_bytes(model, workload, r) * model.intermediate_size * tokens * backward_transient_routes(model)
    )
    # fp32 weights under autocast: autocast caches a bf16 copy of every fp32 leaf weight it casts until the forward's
    # autocast region exits, so the copies of all matmul weights are alive at the loss (measured +14.0 GB for
    # Mistral-7B, see tests/test_estimate_gpu.py); late in backward one layer's recomputed casts are alive.
    # Frozen (LoRA) weights are not cached; without checkpointing their casts stay saved for backward anyway.
    all_casts = layer_casts = 0.0
    # An fp32 lm_head's bf16 autocast copy: cached to the loss, then saved for lm_head's own backward.
    lm_head_cast = 0.0 if model.tie_embeddings or r != 4 else 2.0 * model.vocab_size * model.hidden_size
    if workload.method == "qlora":
        layer_casts = 2.0 * model.hidden_size * model.intermediate_size  # bitsandbytes dequantises one linear at a time
        all_casts = lm_head_cast
    elif r == 4:
        cached, saved = _expert_casts(model, workload)
        layer_casts = 2.0 * (model.params_per_layer - (0 if saved else expert_params(model) / model.num_layers))
        if workload.method == "full" or not workload.grad_checkpointing:
            all_casts = 2.0 * (model.params_total - model.params_embedding - (0 if cached else expert_params(model)))
        if workload.precision == "fp8":  # torchao casts a float8 Linear's fp32 weight to fp8 itself: no bf16 copy
            float8 = 2.0 * fp8_matmul_params(model)
            layer_casts, all_casts = max(layer_casts - float8 / model.num_layers, 0.0), max(all_casts - float8, 0.0)
    mask = sum(held_mask for _, _, (held_mask, _) in groups)
    layer_mask = max(derived for _, _, (_, derived) in groups)
    all_layer_masks = sum(n * derived for n, _, (_, derived) in groups)
    if workload.grad_checkpointing:
        held = {"checkpoints": layers * r * h * tokens, "attention_mask": mask}
        working = {"layer_recompute": per_layer, "backward_transient": transient, "attention_bias": layer_mask}
        bwd = {"checkpoints": r * h * tokens, **working}
        start_casts = layer_casts + lm_head_cast
    else:
        held = {"activations": all_layers, "attention_mask": mask, "attention_bias": all_layer_masks}
        working = {"backward_transient": transient}
        bwd = {"activations": per_layer, **working, "attention_bias": layer_mask}
        start_casts = all_casts or layer_casts
    fwd = {**held, "logits_and_loss": loss_fwd}
    # Backward starts with the loss's own backward, then recomputes the last layer: whichever needs more is the peak.
    start = {**held, **(working if sum(working.values()) >= loss_bwd else {"loss_backward": loss_bwd})}
    start["logits_kept"] = kept
    bwd["logits_kept"] = kept
    bwd["attention_mask"] = mask
    for terms, casts in ((fwd, all_casts), (start, start_casts), (bwd, layer_casts)):
        if casts:
            terms["autocast_weight_copies"] = casts
    return {"forward_end": fwd, "backward_start": start, "backward_end": bwd, "optimizer": {}}
