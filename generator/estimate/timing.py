"""Predicted optimizer-step time: matmul + attention compute, memory-bound passes, CPU optimizer, exposed communication.

compute  = (matmul FLOPs / MATMUL_EFFICIENCY + attention FLOPs / ATTENTION_EFFICIENCY) / dense bf16 peak
           (hardware FLOPs: recompute included; frozen weights skip the weight-gradient GEMMs), less Liger's share
memory   = bytes the fused AdamW update, autocast weight casts, collective copies, LoRA adapter passes and QLoRA
           dequantisation stream through HBM / (HBM x HBM_EFFICIENCY), plus DeepSpeed's fitted overhead
exposed  = comm - min(overlappable comm, OVERLAP_EFFICIENCY x the compute it can hide behind)
step     = compute + memory + cpu optimizer + host copies + exposed comm (+ allocator retries at the memory limit)

Fitted to 2x H200 measurements (bench/results/: the 2026-11-30 matrix under train.py, the topo README's single-GPU
steps and tests/test_estimate_gpu.py's DeepSpeed steps); each constant names the rows it was fitted to.
"""

from __future__ import annotations

from dataclasses import dataclass

from generator.catalog import strategies as catalog
from generator.estimate.attention import attention_flops_per_token, kernel_path
from generator.estimate.comm import Comm
from generator.estimate.hardware import gpu_rates
from generator.estimate.precision import FP8_GEMM_SPEEDUP, cast_bytes_per_token, fp8_matmul_params, weight_cast_bytes
from generator.estimate.scripts import liger_modelled
from generator.estimate.states import load_bytes, lora_params, qlora_unquantised_params, shard_count, trainable_params
from generator.estimate.types import Placement, Workload
from generator.model.sizing import flops_per_token
from generator.model.types import ModelSpec

# Fraction of the dense bf16 peak the decoder's GEMMs (6N per token, 8N with recompute) sustain, memory-bound
# elementwise passes between them included. Calibrated: one H200, Mistral-7B loaded in bf16, seq 4096, micro-batch 1,
# full checkpointing, fused AdamW, SDPA, measured 0.607 s/step (shared/topo/README.md), with the attention share below
# taken out. Used for every GPU model.
MATMUL_EFFICIENCY = 0.514
# Fraction of the dense bf16 peak each attention path sustains on the FLOPs it really computes
# (attention.attention_flops_per_token: every score for dense SDPA, the kept tiles for flex).
# sdpa_dense: fitted to the 8 pairs of 2x H200 matrix rows that differ only in seq 4096 x mb1 vs seq 1024 x mb4 (same
#   tokens; ddp/fsdp/fsdp_grad_op/zero1/zero2/LoRA, with and without checkpointing; packed data, so a dense mask):
#   every pair gives 0.28-0.30; the sweep's fit rows at longer sequences agree (1x H200, one document per sequence,
#   window 4096 < s: full s8192 0.26, LoRA s16384 0.30), so the rate does not fall with s: the s^2 work does it.
# flex: fitted (minimax on tokens/s) to the sweep's flex fit rows whose attention is a real share of the step (one
#   document per sequence: LoRA s16384, QLoRA s16384, FSDP2 LoRA s16384) with the short-document flex rows
#   (s4096-32768, attention a few % of the step) kept within their targets.
# sdpa_causal (flash kernel, no mask): no fit row runs it (every fit row is packed or cut by the window); assumed to
#   sustain flex's rate, both being tiled kernels that skip the masked tiles. eager: assumed dense SDPA's rate.
FLEX_EFF = 0.6
ATTENTION_EFFICIENCY = {"sdpa_dense": 0.29, "flex": FLEX_EFF, "sdpa_causal": FLEX_EFF, "eager": 0.29}
# Fraction of HBM bandwidth a streaming elementwise pass (fused AdamW, dtype casts) reaches. Assumed, not measured;
# with it the fp32-loaded point of the same run is predicted at 0.667 s against 0.684 s measured.
HBM_EFFICIENCY = 0.8
# Share of the compute window that overlappable communication actually hides, per strategy family. Fitted to 0 for
# both on 2x H200 (NVLink, busbw 338 GB/s) under plain Accelerate, eager mode (tests/test_estimate_gpu.py and issue 5):
# DDP bf16 ran 0.662 s/step against 0.611 s on one GPU, i.e. the 43 ms all-reduce fully exposed; FSDP2 ran
# 0.747-0.796 s against a predicted 0.68 s of compute + optimizer + copies, i.e. its 64 ms of collectives were not
# hidden either. Kept as a named term: bucket tuning or torch.compile should raise it, and the benchmarks re-fit it.
OVERLAP_EFFICIENCY = {"ddp": 0.0, "sharded": 0.0}
# FSDP2 / ZeRO-3 memory traffic around each collective, bytes per (unsharded) parameter: an all-gather casts the fp32
# shard to bf16, copies it into the flat buffer and copies the gathered result out to the parameters (~6); a
# reduce-scatter copies the bf16 grads in and casts the reduced shard to fp32 (~4). Derived from FSDP2's
# foreach_all_gather / foreach_reduce design, not measured.
GATHER_COPY_BYTES = 6.0
REDUCE_COPY_BYTES = 4.0
# ZeRO-1/2 time beyond compute, HBM passes and collectives, seconds per micro-step (ZeRO-1: per optimizer step) per
# billion parameters (hooks, flatten/copy kernels, the un-overlapped reduction epilogue). Fitted to
# tests/test_estimate_gpu.py on 2x H200 (Mistral-7B, bf16 load, seq 4096, checkpointing): ZeRO-1 0.747 s, ZeRO-2
# 0.744 s; the matrix's 6 fp32-load ZeRO-1/2 rows land within 4% with it. Scaling with parameter count is assumed.
DEEPSPEED_OVERHEAD_S_PER_BPARAM = 0.011
# ZeRO-3 time beyond compute, HBM passes and collectives, seconds per forward or backward pass per billion parameters:
# every pass fetches and releases each submodule's parameters through Python hooks (and the recompute of activation
# checkpointing is a third pass that gathers them all again), so the cost follows passes, not micro-steps. Fitted
# (minimax) to the 4 ZeRO-3 rows on 2x H200, Mistral-7B, seq 4096 unless noted: bf16 load + ckpt 1.269 s (a single
# timed step of tests/test_estimate_gpu.py), fp32 load + ckpt 1.047 s, seq 1024 x mb4 + ckpt 0.891 s, no ckpt
# 0.814 s (matrix medians over 18 steps, which scatter +-15% step to step). The single-step row and the seq-1024 row
# end at opposite ends, about 13% each on tokens/s; the other two within 7%.
ZERO3_OVERHEAD_S_PER_PASS_PER_BPARAM = 0.0183
# LoRA adapter traffic, HBM bytes per token per unit of adapted width (sum of in + out features over the adapted
# linears) per forward pass; backward costs LORA_BACKWARD_PASSES forward passes. Each adapted linear adds peft's
# memory-bound work beside its GEMM: the input cast to the fp32 adapter dtype and back to bf16 under autocast, the
# rank-r matmuls that read the whole input and write the whole output, the scaling multiply and the add into the
# base output; backward mirrors each with gradient reads/writes plus the input-gradient accumulation. Fitted to the
# 5 LoRA rows (1x/2x DDP, fp32-loaded base, seq 4096, ckpt on/off; 2x seq 1024 x mb4 ckpt; rank 16,
# q/k/v/o/gate/up/down): the ckpt/no-ckpt residuals (0.18 / 0.14 s) fix the backward at 3 forward passes, and 12.7
# bytes is close to the ~10 that counting those reads/writes gives. Without it they were predicted 48-65% too fast.
# Not measured under FSDP/DeepSpeed, whose bf16 activation stream should make the adapters somewhat cheaper.
LORA_BYTES_PER_TOKEN_WIDTH = 12.7
LORA_BACKWARD_PASSES = 3.0
# Share of those adapter passes that disappear when each decoder layer is compiled (train.py --compile-layers, and
# always under fp8): inductor fuses peft's casts, scaling and add into the neighbouring kernels. Fitted to one row, bf16
# LoRA with the layers compiled (bench/results/h200-x1-fp8-2026-12-01-rerun.json,
# train.py-g1-ddp-lora-s4096-mb4-ckptoff-flex-short-liger-compiled: 18,111 tokens/s against 14,474 eager); checked on
# the fp8 LoRA rows, which it never saw (bench/holdout.py FP8_VALIDATION_KEYS).
COMPILED_ADAPTER_FUSED = 0.85
# QLoRA: bitsandbytes dequantises every 4-bit (NF4, double-quantised) weight to bf16 at each use: forward, the
# recompute, and backward (the input gradient needs the weight again). Effective HBM bytes per quantised parameter per
# use; far above the 2.5 bytes it moves (0.5 read + 2 written) because the dequantisation kernel reaches a small
# share of the bandwidth. Fitted to the one QLoRA row (1x H200, seq 4096, ckpt: 0.778 s/step).
QLORA_DEQUANT_BYTES_PER_PARAM = 25.7
# Liger's fused RMSNorm / SwiGLU / RoPE / linear cross-entropy kernels remove memory-bound elementwise passes that
# MATMUL_EFFICIENCY otherwise absorbs; they scale with tokens and passes as the compute does, so the saving is a share
# of the compute time. Fitted to the 4 Liger rows on 2x H200 (FSDP2, fp32 load, no ckpt, seq 4096, mb 1/2/4 and
# issue 5's mb 2): they ran 6-14% faster than the same model without Liger predicts.
LIGER_COMPUTE_SAVING = 0.11
# Caching-allocator retries when the working set sits at the card's limit: a failed cudaMalloc makes PyTorch free
# its cached blocks (device-wide synchronise + cudaFree) and malloc again, every micro-step. Applies when the
# predicted reserved memory exceeds ALLOCATOR_PRESSURE_FRACTION of the card (only with headroom below the planner's
# default 10%). Fitted to the three matrix rows whose measured reserved reached 148-149 of 150.75 GB (1x DDP and 1x
# FSDP2 fp32 without checkpointing, 2x FSDP2 Liger mb4; the 1x FSDP2 one alternates 0.59 / 0.67 s steps); every other
# row stayed below 138 GB measured and 138 GB predicted and shows no such cost.
ALLOCATOR_PRESSURE_FRACTION = 0.95
ALLOCATOR_RETRY_S_PER_MICRO_STEP = 0.06
# DeepSpeed CPU-Adam throughput per machine (parameters updated per second). Assumed from the ZeRO-Offload paper's
# order of magnitude (Ren et al. 2021: CPU-Adam updates ~1e9 params in well under a second on one socket).
CPU_ADAM_PARAMS_PER_S = 2e9
# Fused AdamW traffic per parameter, beyond the states: read grad; read+write param, m and v.
_ADAM_PASSES = 2
# torch AdamW's foreach step (custom script), element passes in the parameters' dtype, from the op list of
# torch/optim/adam.py 691-800 (docs/scripts.md): lerp_(m, g) 3, mul_(v) 2, addcmul_(v, g, g) 3, sqrt(v) 2, div_ 2,
# add_(eps) 2, addcdiv_(p, m, sqrt) 4; decoupled weight decay adds mul_(p) 2. Fused AdamW moves 7 (grad, p, m, v).
FOREACH_ADAM_PASSES = 18
FOREACH_DECAY_PASSES = 2
FUSED_ADAM_PASSES = 7


@dataclass(frozen=True)
class Timing:
    compute_s: float
    """Matmul and attention time of all micro-steps (recompute included, Liger's saving taken off)."""
    memory_s: float
    """HBM-bound passes (optimizer update, autocast casts, collective copies, LoRA adapters, QLoRA dequantisation)
    and DeepSpeed's fitted overhead."""
    cpu_s: float
    """CPU optimizer time (offload)."""
    exposed_comm_s: float
    """Collective time not hidden behind compute."""
    step_s: float
    """Optimizer-step time: the sum of the above plus host copies and allocator retries."""
    tokens_per_s_per_gpu: float
    mfu: float
    """Model FLOPs (6N + 12*L*h*s) per second over the dense bf16 peak (bf16-equivalent, for fp8 too)."""
    allocator_s: float = 0.0
    """Caching-allocator retries at the memory limit (zero unless the predicted reserved memory was given)."""


def _forward_passes(workload: Workload) -> int:
    """Forward passes per micro-step: activation checkpointing reruns the forward inside backward."""
    return 2 if workload.grad_checkpointing else 1


def _compute_s(model: ModelSpec, workload: Workload, peak_flops: float) -> float:
    """Matmul + attention seconds of one optimizer step on one GPU."""
    tokens = workload.seq_len * workload.micro_batch * workload.grad_accum
    fwd = _forward_passes(workload)
    # Forward 2N per token; backward 4N (input and weight gradients), only 2N when the weights are frozen.
    backward = 4.0 if workload.method == "full" else 2.0
    matmul = (2.0 * fwd + backward) * model.matmul_params_active
    if workload.precision == "fp8":  # the float8 Linears' GEMMs run at the fp8 peak (estimate.precision)
        matmul -= (2.0 * fwd + backward) * fp8_matmul_params(model) * (1 - 1 / FP8_GEMM_SPEEDUP)
    # Attention has no weights: its backward is 2x its forward whatever is frozen (forward 4 + backward 8 per key).
    attn = attention_flops_per_token(model, workload) * (fwd + 2) / 3
    efficiency = ATTENTION_EFFICIENCY[kernel_path(model, workload)]
    seconds = tokens * (matmul / MATMUL_EFFICIENCY + attn / efficiency) / peak_flops
    return seconds * (1 - LIGER_COMPUTE_SAVING) if liger_modelled(workload) else seconds


def _update_bytes(model: ModelSpec, workload: Workload, placement: Placement, strategy: str) -> float:
    """HBM bytes of one optimizer update on one GPU (zero when the optimizer runs on the CPU)."""
    s = catalog.strategy(strategy)
    if s.offload != "none":
        return 0.0
    t = trainable_params(model, workload)
    state = 2.0 if workload.optimizer == "adamw8bit" else None
    if s.framework == "ddp":
        wb = load_bytes(workload) if workload.method == "full" else 4
        return t * (_ADAM_PASSES * wb + wb + _ADAM_PASSES * (state or 2 * wb))
    # fp32 master + fp32 grad + states, plus the bf16 grad -> fp32 and fp32 -> bf16 parameter conversions.
    n = shard_count(strategy, placement)
    return t * (_ADAM_PASSES * 4 + 4 + _ADAM_PASSES * (state or 8) + 6) / n


def _foreach_extra_bytes(model: ModelSpec, workload: Workload, placement: Placement, strategy: str) -> float:
    """HBM bytes the foreach AdamW step moves beyond the fused one (zero for train.py / trainer, and for DeepSpeed,
    whose optimizer is its own)."""
    from generator.estimate.scripts import script_facts

    facts = script_facts(workload.script)
    s = catalog.strategy(strategy)
    if facts.adamw != "foreach" or workload.optimizer != "adamw" or s.framework == "deepspeed":
        return 0.0
    passes = FOREACH_ADAM_PASSES + (FOREACH_DECAY_PASSES if facts.weight_decay else 0) - FUSED_ADAM_PASSES
    if s.framework == "ddp":
        param_bytes = load_bytes(workload) if workload.method == "full" else 4
        return passes * param_bytes * trainable_params(model, workload)
    return passes * 4.0 * trainable_params(model, workload) / shard_count(strategy, placement)


def _cast_bytes(model: ModelSpec, workload: Workload, strategy: str) -> float:
    """fp32 weights under autocast (DDP): each forward (and recompute) casts them to bf16 (read 4 + write 2 bytes),
    and backward casts the bf16 weight gradients into the fp32 .grad (read 2 + write 4). A frozen LoRA base is cast
    the same way in every forward but has no weight gradients; a QLoRA base is 4-bit (see _dequant_bytes)."""
    if catalog.strategy(strategy).framework != "ddp" or workload.load_dtype != "fp32" or workload.method == "qlora":
        return 0.0
    grads = 6.0 if workload.method == "full" else 0.0
    return workload.grad_accum * model.params_total * (6.0 * _forward_passes(workload) + grads)


def _collective_copy_bytes(model: ModelSpec, workload: Workload, strategy: str) -> float:
    """Copy-in/copy-out and dtype casts around the all-gathers and reduce-scatters of sharded parameters."""
    s = catalog.strategy(strategy)
    gathers = s.gathers_per_micro_step
    if not gathers:
        return 0.0
    # FSDP reduce-scatters once per optimizer step (Accelerate's no_sync), ZeRO-3 every micro-step
    reduces = 1 if s.framework == "fsdp" else workload.grad_accum
    return model.params_total * (gathers * workload.grad_accum * GATHER_COPY_BYTES + reduces * REDUCE_COPY_BYTES)


def _adapter_bytes(model: ModelSpec, workload: Workload) -> float:
    """peft's memory-bound passes around every adapted linear (LoRA and QLoRA)."""
    if workload.method == "full":
        return 0.0
    tokens = workload.seq_len * workload.micro_batch * workload.grad_accum
    passes = _forward_passes(workload) + LORA_BACKWARD_PASSES
    fused = COMPILED_ADAPTER_FUSED if workload.layers_compiled else 0.0
    width = lora_params(model, 1, workload.lora_targets)
    return tokens * width * LORA_BYTES_PER_TOKEN_WIDTH * passes * (1 - fused)


def _dequant_bytes(model: ModelSpec, workload: Workload) -> float:
    """QLoRA: every use of a 4-bit weight (each forward, backward) dequantises it; embeddings and lm_head stay fp32."""
    if workload.method != "qlora":
        return 0.0
    quantised = model.params_total - qlora_unquantised_params(model)
    uses = _forward_passes(workload) + 1
    return workload.grad_accum * quantised * uses * QLORA_DEQUANT_BYTES_PER_PARAM


def _fp8_cast_bytes(model: ModelSpec, workload: Workload) -> float:
    """Float8 amax + cast passes over activations, gradients and weights (estimate.precision; unfitted)."""
    if workload.precision != "fp8":
        return 0.0
    tokens = workload.seq_len * workload.micro_batch * workload.grad_accum
    fwd = _forward_passes(workload)
    acts = tokens * cast_bytes_per_token(model, fwd, frozen=workload.method != "full")
    return acts + workload.grad_accum * weight_cast_bytes(model, fwd)


def _deepspeed_s(model: ModelSpec, workload: Workload, strategy: str) -> float:
    """DeepSpeed's fitted overhead beyond the modelled traffic (zero for other strategies)."""
    bparams = model.params_total / 1e9
    stage = catalog.strategy(strategy).zero_stage
    if stage == 3:
        passes = _forward_passes(workload) + 1
        return ZERO3_OVERHEAD_S_PER_PASS_PER_BPARAM * passes * workload.grad_accum * bparams
    if stage:
        # ZeRO-1 reduces once per optimizer step; ZeRO-2 hooks every micro-step's backward.
        times = 1 if stage == 1 else workload.grad_accum
        return DEEPSPEED_OVERHEAD_S_PER_BPARAM * times * bparams
    return 0.0


def step_timing(
    model: ModelSpec,
    workload: Workload,
    placement: Placement,
    strategy: str,
    comm: Comm,
    reserved_gb: float | None = None,
) -> Timing:
    """`reserved_gb`: the predicted peak reserved memory per GPU, for the allocator-pressure term (None: no term)."""
    rates = gpu_rates(placement.gpu_name)
    s = catalog.strategy(strategy)
    tokens = workload.seq_len * workload.micro_batch * workload.grad_accum
    compute = _compute_s(model, workload, rates.dense_bf16_tflops * 1e12)
    moved = _update_bytes(model, workload, placement, strategy) + _cast_bytes(model, workload, strategy)
    moved += _collective_copy_bytes(model, workload, strategy)
    moved += _foreach_extra_bytes(model, workload, placement, strategy)
    moved += _adapter_bytes(model, workload) + _dequant_bytes(model, workload)
    moved += _fp8_cast_bytes(model, workload)
    memory = moved / (rates.hbm_tbps * 1e12 * HBM_EFFICIENCY) + _deepspeed_s(model, workload, strategy)
    cpu = 0.0
    if s.offload != "none":
        cpu = trainable_params(model, workload) / (placement.num_machines * CPU_ADAM_PARAMS_PER_S)
    # DDP buckets fire during backward (2/3 of a step, 3/4 with recompute); sharded gathers span the whole step.
    ddp = s.framework == "ddp"
    window = compute * ((0.75 if workload.grad_checkpointing else 2 / 3) if ddp else 1.0)
    overlap = OVERLAP_EFFICIENCY["ddp" if ddp else "sharded"]
    hidden = min(comm.overlappable_s, overlap * window)
    exposed = max(0.0, comm.seconds - hidden)
    allocator = 0.0
    if reserved_gb is not None and reserved_gb > ALLOCATOR_PRESSURE_FRACTION * placement.gpu_memory_gb:
        allocator = ALLOCATOR_RETRY_S_PER_MICRO_STEP * workload.grad_accum
    step = compute + memory + cpu + comm.host_s + exposed + allocator
    tps = tokens / step if step > 0 else 0.0
    mfu = tps * flops_per_token(model, workload.seq_len) / (rates.dense_bf16_tflops * 1e12)
    return Timing(compute, memory, cpu, exposed, step, tps, mfu, allocator)
