"""Memory-bound passes between the GEMMs: HBM bytes per token of the norms, residual adds, RoPE, SwiGLU, the MoE
token shuffle and the loss, counted from the ops each runs (transformers 5 eager code, bf16 activations, 2 bytes an
element). compute_time divides them by the table's widening-copy rate (ComputeTable.passes_gbps), times
ELEMENTWISE_SCALE (fitted, see bench/fit_compute.py) for what counting misses (launch gaps between small kernels,
partial-bandwidth reductions).

Forward, per decoder layer and token (h hidden, q = heads x d, kv = kv_heads x d, i intermediate):
- RMSNorm, twice: to(fp32) r2 w4, pow r4 w4, mean r4, x*rsqrt r4 w4, to(bf16) r4 w2, weight* r2 w2 = 36 bytes/elem.
- residual adds, twice: r2 r2 w2 = 6.
- q_norm and k_norm where the model has them (Qwen3, OLMo-2, Gemma-3): RMSNorm's 36 bytes/elem over q and kv.
- RoPE on q and k: q*cos r2 w2, rotate_half (slice, neg, cat) r2 w2 + r2 w2, *sin r2 w2, add r2 r2 w2 = 18 / elem.
- attention output transpose(1, 2).contiguous(): r2 w2 over q.
- SwiGLU: silu(gate) r2 w2, * up r2 r2 w2 = 10 over i (per routed expert for an MoE: top_k x i).
- MoE: router softmax/top-k over E (small) and the token gather/scatter, index_select r2 w2 + index_add r2 r2 w2
  over h, per routed copy (top_k).
A model sized on the meta device has its eager layer's bytes counted from its own ops instead
(model.pass_count: a GELU MLP with LayerNorms moves 0.4 of the llama layer's bytes, Gemma-2's four norms 1.6); the
fused paths below stay the llama layer's.
Backward: ELEMENTWISE_BACKWARD_RATIO x the forward (each op reads its saved inputs and the incoming gradient and
writes one gradient). Loss, per token, once: logits w2 V, .float() r2 w4, log_softmax r4 w4, its backward r4 w4 and
the cast back r4 w2 = 30 bytes per vocabulary entry.
Fused paths (Liger's RMSNorm / SwiGLU / RoPE kernels; torch.compile'd decoder layers, where inductor fuses the same
chains): RMSNorm r2 w2 (+ the residual add folded in), RoPE r2 w2 in place, SwiGLU r2 r2 w2 = 4, 4, 6 bytes/elem;
Liger's fused linear cross-entropy streams the logits in chunks: 8 bytes per vocabulary entry.
LoRA dropout (TRL's CLI default 0.05; peft runs `lora_A(dropout(x))` on each adapter's own fp32 copy of its input,
peft/tuners/lora/layer.py): forward r4 w4 and the bool mask w1, backward the gradient r4 with the mask r1, w4 = 9 and 9
bytes per input element of every adapted Linear (eager layers only: a compiled layer fuses it into its neighbours).
QLoRA whose unquantised parameters are fp32 (peft's prepare_model_for_kbit_training: train.py, a plain loop following
peft's recipe, any fp32 load): the norms' fp32 weights make the residual stream fp32, and bitsandbytes' Linear4bit casts
its input to the bf16 compute dtype and its output back to the input's dtype (bitsandbytes/nn/modules.py
Linear4bit.forward), so every elementwise pass above moves 4-byte elements except attention's own (autocast runs SDPA
in bf16), plus those casts: in r4 w2 over the inputs of q, k, v, gate, up (h each) and down (i), out r2 w4 over the
outputs of q, k, v, gate, up and down. TRL's --dtype bfloat16 QLoRA keeps a bf16 stream and neither.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from generator.estimate.lora_targets import adapted_input_width
from generator.estimate.moe import expert_rows, gated_experts, shared_mlp
from generator.estimate.scripts import liger_fused_loss, liger_kernels
from generator.estimate.states import qlora_kept_bytes
from generator.estimate.types import Workload
from generator.model.types import ModelSpec

DROPOUT_BYTES_PER_ELEM = 9.0
"""LoRA dropout's bytes per input element, forward and again backward (module docstring)."""
ELEMENTWISE_BACKWARD_RATIO = 2.0
"""Backward bytes per forward byte of the elementwise chain (read saved input + incoming gradient, write one)."""
LOSS_BYTES_PER_VOCAB = 30.0
LIGER_LOSS_BYTES_PER_VOCAB = 8.0
LIGER_CHUNK_CAST_BYTES = 6.0
"""Per chunk of Liger's fused linear cross-entropy over an fp32 lm_head weight under autocast: its logits matmul
casts the whole weight to bf16 (read 4 + write 2 bytes an element), because it reads `weight.t()`, a view, which
autocast's cast cache skips (it keeps leaf, non-view tensors: the input-gradient matmul's plain `weight` is cast once
and reused); its forward runs under the caller's autocast (torch.amp.custom_fwd without cast_inputs).
liger_kernel/ops/fused_linear_cross_entropy.py, liger-kernel 0.8.5; the cache's rule is checked on the installed
torch by tests/test_estimate_liger_weight.py."""
LIGER_CHUNK_ACCUMULATE_BYTES = 8.0
"""... and, where the weight is trained, addmm(out_dtype=fp32) accumulating the chunk's gradient into the fp32
weight-gradient buffer: read 4 + write 4 bytes an element (the same file)."""


@dataclass(frozen=True)
class PassBytes:
    layer_forward: float
    """Bytes per token of one forward of one decoder layer's elementwise chain."""
    layer_backward: float
    """... and of its backward."""
    loss: float
    """Bytes per token of the loss (forward and backward, once per micro-step)."""


def _eager(model: ModelSpec) -> float:
    """An eager layer's forward bytes per token: the model's own count where it was sized on meta
    (LayerSaved.pass_bytes: its norms, activation, biases and casts as its code runs them), else the llama hand
    count, which that count reproduces for Mistral and Qwen3 within 0.4%."""
    counted = model.layer_saved.pass_bytes if model.layer_saved is not None else None
    if counted is not None:
        return counted
    h, q, kv = model.hidden_size, model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    k = expert_rows(model)
    moe = 10.0 * h * k if model.num_experts else 0.0
    head_norms = 36.0 * (q + kv) if model.qk_norm else 0.0  # RMSNorm's chain over q and k (ModelSpec.qk_norm)
    return 2 * 36.0 * h + 2 * 6.0 * h + 18.0 * (q + kv) + 4.0 * q + _mlp_act(model, False) + moe + head_norms


def _fused(model: ModelSpec, swiglu_fused: bool) -> float:
    h, q, kv = model.hidden_size, model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    k = expert_rows(model)
    moe = 10.0 * h * k if model.num_experts else 0.0
    head_norms = 4.0 * (q + kv) if model.qk_norm else 0.0
    return 2 * 4.0 * h + 4.0 * (q + kv) + 4.0 * q + _mlp_act(model, swiglu_fused) + moe + head_norms


def _mlp_act(model: ModelSpec, fused: bool) -> float:
    """Bytes per token of the MLP's activation: SwiGLU over the intermediate width (10 bytes an element eager, 6
    fused) per routed expert, and a shared expert's beside them; an ungated expert's squared ReLU (relu r2 w2, square
    r2 w2: 8; one fused pass: 4)."""
    per = (6.0 if fused else 10.0) if gated_experts(model) else (4.0 if fused else 8.0)
    return per * model.intermediate_size * expert_rows(model) + (6.0 if fused else 10.0) * shared_mlp(model)[0]


def pass_bytes(model: ModelSpec, workload: Workload) -> PassBytes:
    """Elementwise bytes per token: fused when Liger's kernels or the compiled layers take the chain. Liger leaves an
    MoE's experts (and so their SwiGLU) to transformers (training/model.py apply_liger)."""
    liger = liger_kernels(workload)
    if workload.layers_compiled:
        per_layer = _fused(model, swiglu_fused=True)
    elif liger:
        per_layer = _fused(model, swiglu_fused=not model.num_experts)
    else:
        per_layer = _eager(model)
    if fp32_stream(workload):
        per_layer = _fp32_stream(model, per_layer, fused=liger or workload.layers_compiled)
    vocab = LIGER_LOSS_BYTES_PER_VOCAB if liger_fused_loss(workload) else LOSS_BYTES_PER_VOCAB
    dropout = _dropout_bytes(model, workload)
    return PassBytes(per_layer + dropout, ELEMENTWISE_BACKWARD_RATIO * per_layer + dropout, vocab * model.vocab_size)


def fp32_stream(workload: Workload) -> bool:
    """QLoRA with fp32 unquantised parameters: the residual stream between the 4-bit Linears is fp32."""
    return workload.method == "qlora" and qlora_kept_bytes(workload) == 4


def _fp32_stream(model: ModelSpec, per_layer: float, fused: bool) -> float:
    """A layer's elementwise bytes per token with an fp32 stream (module docstring). The norms and residual adds are
    fp32 in the eager full fine-tune rows ELEMENTWISE_SCALE was fitted on too (fp32 norm weights under autocast), so
    what is added here is what only QLoRA's stream moves in fp32: RoPE on q and k and SwiGLU at 4 bytes an element
    (eager or fused, as the layer runs them), and bitsandbytes' casts into and out of the 4-bit Linears."""
    q, kv = model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    h = model.hidden_size
    i = model.intermediate_size * expert_rows(model) + shared_mlp(model)[0]
    rope_swiglu = 4.0 * (q + kv) + 6.0 * i if fused else 18.0 * (q + kv) + 10.0 * i
    casts = 6.0 * (5 * h + i) + 6.0 * (q + 2 * kv + 2 * i + h)
    return per_layer + rope_swiglu + casts


def _dropout_bytes(model: ModelSpec, workload: Workload) -> float:
    """LoRA dropout's bytes per token and layer, one way (forward or backward)."""
    if workload.method == "full" or workload.lora_dropout <= 0 or workload.layers_compiled:
        return 0.0
    return DROPOUT_BYTES_PER_ELEM * adapted_input_width(model, workload.lora_targets)


def elementwise_bytes(model: ModelSpec, workload: Workload, forward_passes: int) -> float:
    """HBM bytes of the elementwise passes of one micro-step (recompute included)."""
    b = pass_bytes(model, workload)
    tokens = workload.seq_len * workload.micro_batch
    return tokens * (model.num_layers * (forward_passes * b.layer_forward + b.layer_backward) + b.loss)


def liger_loss_chunks(model: ModelSpec, workload: Workload) -> int:
    """Chunks of Liger's fused linear cross-entropy in one micro-step: the tokens split so each chunk's logits are
    about tokens x hidden elements (chunk = next power of two of tokens / ceil(vocab / hidden), at most the tokens)."""
    tokens = workload.seq_len * workload.micro_batch
    per = math.ceil(tokens / math.ceil(model.vocab_size / model.hidden_size))
    chunk = min(1 << max(per - 1, 0).bit_length(), tokens)
    return math.ceil(tokens / chunk)


def liger_weight_bytes(model: ModelSpec, workload: Workload, fp32_weights: bool) -> float:
    """HBM bytes per optimizer step that Liger's fused loss moves over the lm_head weight when that weight is fp32
    under autocast (`fp32_weights`: fp32 masters under DDP): LIGER_CHUNK_CAST_BYTES per chunk, and the gradient's
    accumulation where the weight is trained (a full fine-tune). A bf16 weight has neither."""
    if not (fp32_weights and liger_fused_loss(workload)):
        return 0.0
    per_element = LIGER_CHUNK_CAST_BYTES + (LIGER_CHUNK_ACCUMULATE_BYTES if workload.method == "full" else 0.0)
    elements = model.vocab_size * model.hidden_size
    return workload.grad_accum * liger_loss_chunks(model, workload) * elements * per_element
