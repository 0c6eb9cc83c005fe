"""Activation memory of a decoder by phase (forward end, backward start and end): its layers' saved tensors
(estimate.layer_saved, LoRA's change in estimate.lora_saved), checkpoints, the backward's transients, the loss and
autocast's weight copies.
The loss (estimate.loss): while it is computed, the bf16 logits, their fp32 upcast (`logits.float()` in
ForCausalLMLoss) and the log-softmax the cross-entropy keeps; through backward, the logits Accelerate returns (fp32
after convert_outputs_to_fp32; bf16 under DeepSpeed), and at its start the log-softmax with its two fp32 gradients.
Liger's fused linear cross-entropy materialises none of it.
LoRA / QLoRA (peft 0.21) change what the layer keeps: see estimate.lora_saved.
A model sized on the meta device carries its own layer's count (ModelSpec.layer_saved): what it keeps beyond this
formula at the counted path (another MLP, norm or projection layout, dropout) is added on every path and lever
(estimate.own_layer.own_layer_delta).
Attention masks (attention.mask_bytes): dense SDPA's bool mask is held from the forward through backward, and each
attention call's bf16 bias lives with that layer's saved tensors (one layer under checkpointing, all without).
"""

from __future__ import annotations

from generator.estimate.attention import kernel_path, kernel_path_of_count, layer_groups, mask_bytes
from generator.estimate.layer_saved import layer_saved_bytes_per_token, residual_bytes
from generator.estimate.lora_saved import lora_saved_delta_per_token
from generator.estimate.lora_targets import adapted_targets
from generator.estimate.loss import LOSS_BACKWARD_BYTES, LOSS_FORWARD_BYTES, fused_head_bytes, logits_kept_bytes
from generator.estimate.moe import backward_transient_routes, expert_params
from generator.estimate.own_layer import compiled_count, counted_stream, own_layer_delta
from generator.estimate.precision import fp8_matmul_params
from generator.estimate.scripts import liger_fused_loss, liger_kernels, script_facts
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
    # An fp32 lm_head's bf16 autocast copy: cached to the loss, then saved for lm_head's own backward. Tied to the
    # embeddings it is cast all the same (the lookup reads the fp32 matrix; lm_head's matmul casts it), but the
    # parameter count holds that matrix once, as the embeddings: added back below (tests/test_estimate_tied_head.py).
    lm_head_cast = 0.0 if r != 4 else 2.0 * model.vocab_size * model.hidden_size
    tied_head = lm_head_cast if model.tie_embeddings else 0.0
    if workload.method == "qlora":
        layer_casts = 2.0 * model.hidden_size * model.intermediate_size  # bitsandbytes dequantises one linear at a time
        all_casts = lm_head_cast
    elif r == 4:
        cached, saved = _expert_casts(model, workload)
        layer_casts = 2.0 * (model.params_per_layer - (0 if saved else expert_params(model) / model.num_layers))
        if workload.layers_compiled and workload.grad_checkpointing:
            # a compiled layer's casts are ops of its graph, not autocast's cache: without checkpointing the graph
            # saves them for its backward (as the cache would keep them), under checkpointing nothing is saved;
            # lm_head runs eager, and its trained weight's copy stays cached (tests/test_estimate_compiled_casts.py)
            all_casts = lm_head_cast if workload.method == "full" else 0.0
        elif workload.method == "full" or not workload.grad_checkpointing:
            all_casts = 2.0 * (model.params_total - model.params_embedding - (0 if cached else expert_params(model)))
            all_casts += tied_head
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
    # The loop holds the previous step's output (train.py's `out_`, a plain loop's `out`) until this forward returns,
    # so its logits (fp32 where Accelerate's convert_outputs_to_fp32 wraps the forward) are alive through the loss:
    # on every later step the memory history frees a [tokens, vocab] fp32 block from before the step (Llama-3.2-3B,
    # StarCoder2, Phi: memhist-llama32-full-h100-2026-12-07 and the -starcoder2- and -phi-fp8- files).
    fwd = {**held, "logits_and_loss": loss_fwd, "logits_kept": kept}
    # Backward starts with the loss's own backward, then recomputes the last layer: whichever needs more is the peak.
    start = {**held, **(working if sum(working.values()) >= loss_bwd else {"loss_backward": loss_bwd})}
    start["logits_kept"] = kept
    bwd["logits_kept"] = kept
    bwd["attention_mask"] = mask
    for terms, casts in ((fwd, all_casts), (start, start_casts), (bwd, layer_casts)):
        if casts:
            terms["autocast_weight_copies"] = casts
    return {"forward_end": fwd, "backward_start": start, "backward_end": bwd, "optimizer": {}}
