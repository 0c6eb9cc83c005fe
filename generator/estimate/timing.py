"""Predicted optimizer-step time: operator compute, memory-bound passes, CPU optimizer, exposed communication.

compute  = each GEMM at its measured rate by shape and dtype + MoE grouped GEMMs + attention by kernel path +
           the elementwise chain and float8 casts at measured HBM rates (estimate.compute_time; recompute included;
           frozen weights skip the weight-gradient GEMMs)
memory   = bytes the fused AdamW update, autocast weight casts, collective copies, LoRA adapter passes and QLoRA
           dequantisation stream through HBM / the table's measured HBM rate, plus DeepSpeed's fitted overhead
exposed  = comm - min(overlappable comm, OVERLAP_EFFICIENCY x the compute it can hide behind)
step     = compute + memory + cpu optimizer + host copies + exposed comm (+ allocator retries at the memory limit)

Fitted to 2x H200 measurements (bench/results/: the 2026-11-30 matrix under train.py, the topo README's single-GPU
steps and tests/test_estimate_gpu.py's DeepSpeed steps); each constant names the rows it was fitted to.
"""

from __future__ import annotations

from dataclasses import dataclass

from generator.catalog import strategies as catalog
from generator.estimate.attention import attention_flops_per_token, useful_keys_per_query
from generator.estimate.comm import Comm
from generator.estimate.compute_source import fitted, table_for
from generator.estimate.compute_time import (
    ComputeTime,
    compute_time,
    forward_passes,
    fp8_layers_in_row,
    quantised_layers_in_row,
)
from generator.estimate.hardware import gpu_rates
from generator.estimate.operators import executed_flops_per_token
from generator.estimate.passes import liger_weight_bytes
from generator.estimate.states import load_bytes, lora_params, qlora_unquantised_params, shard_count, trainable_params
from generator.estimate.types import Placement, Workload
from generator.model.types import ModelSpec

# GEMMs, attention and HBM come from the GPU's measured operator-rate table (estimate.compute_table; shipped for
# the H200 in generator/compute/h200.json, read from `plan --compute-file`, scaled by the catalog for other GPUs):
# no efficiency or speed-up constant for every model (estimate.compute_time). What counting the elementwise ops
# misses is one fitted scale (estimate.compute_time.ELEMENTWISE_SCALE), fitted by bench/fit_compute.py on the rows
# generator/compute/fit.json names. Streaming passes below (fused AdamW, dtype casts, collective copies, adapters,
# dequantisation) move at the table's measured HBM rate.
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
# Issue 26: the constants of this module that were fitted on residuals of the former compute term (the DeepSpeed and
# ZeRO-3 overheads, the LoRA adapter bytes, the QLoRA dequantisation bytes, the compiled adapter share) are refitted
# by bench/fit_compute.py on the same rows on top of the operator model; generator/compute/fit.json holds each value
# with its rows and their errors and is what the estimator reads (fitted(key, default)); the values written here are
# the defaults without a fit file (the former fit).
LORA_BYTES_KEY = "lora_bytes_per_token_width"
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
# Liger's fused RMSNorm / SwiGLU / RoPE / linear cross-entropy kernels: estimate.passes counts the bytes their
# fused kernels move instead of the eager chains' (no share of the compute any more).
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
# clip_grad_norm_, which train.py, TRL's Trainer and the bench's plain loop run every step (max norm 1.0 by default):
# torch's _foreach_norm reads every gradient once, then _foreach_mul_ by the clamped coefficient reads and writes each
# again, whatever the norm (torch/nn/utils/clip_grad.py: no `if clip_coef < 1` branch, to avoid a host sync). Mixtral
# cut to 4 layers and fully fine-tuned spent 20 ms a step in it (3.6 TB/s; profile-mixtral-l4-full-h200-2026-12-04).
# Priced, like fused AdamW's update, at the table's stream rate (4.2 TB/s on one H200), not at the 3.0-3.3 TB/s the
# probe's optimizer rows give both (optimizer-rows-h200-2026-12-04-b): with both at that rate the refit moved LoRA's
# adapter bytes to 9.4 and six more Liger LoRA rows past 10% slow (bench/REPORT.md cause 4). DeepSpeed clips inside its
# engine, which its fitted overhead holds.
CLIP_PASSES = 3


@dataclass(frozen=True)
class Timing:
    compute_s: float
    """Operator time of all micro-steps (estimate.compute_time: GEMMs, experts, attention, elementwise chain,
    float8 casts; recompute included)."""
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
    """Executed model FLOPs per second (model_flops_per_token) over the dense bf16 peak: bf16-equivalent for fp8."""
    allocator_s: float = 0.0
    """Caching-allocator retries at the memory limit (zero unless the predicted reserved memory was given)."""
    parts: ComputeTime | None = None
    """compute_s by operator kind (GEMMs, experts, attention, elementwise, float8 casts)."""
    tail_s: float = 0.0
    """The part of memory_s issued after the backward (clip and the optimizer's update, _tail_bytes), which a
    host-bound step adds to the host's time."""


def _forward_passes(workload: Workload) -> int:
    """Forward passes per micro-step: activation checkpointing reruns the forward inside backward."""
    return forward_passes(workload)


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
    return passes * _trained_pass_bytes(model, workload, placement, strategy)


def _trained_pass_bytes(model: ModelSpec, workload: Workload, placement: Placement, strategy: str) -> float:
    """HBM bytes of one pass over the trained parameters (or their gradients) held on one GPU: DDP's in the load
    dtype (fp32 adapters under LoRA); a sharded strategy's fp32 shard."""
    if catalog.strategy(strategy).framework == "ddp":
        param_bytes = load_bytes(workload) if workload.method == "full" else 4
        return param_bytes * trainable_params(model, workload)
    return 4.0 * trainable_params(model, workload) / shard_count(strategy, placement)


def _clip_bytes(model: ModelSpec, workload: Workload, placement: Placement, strategy: str) -> float:
    """HBM bytes of clip_grad_norm_ on one GPU: the gradients read for the norm, then read and written by the scale
    (FSDP2 clips each rank's shard of its fp32 gradients; DeepSpeed's own clip is in its fitted overhead)."""
    s = catalog.strategy(strategy)
    if s.offload != "none" or s.framework == "deepspeed":
        return 0.0
    return CLIP_PASSES * _trained_pass_bytes(model, workload, placement, strategy)


def _cast_bytes(model: ModelSpec, workload: Workload, strategy: str, fp32_layers_in_row: bool = False) -> float:
    """fp32 weights under autocast (DDP): each forward (and recompute) casts them to bf16 (read 4 + write 2 bytes),
    and backward casts the bf16 weight gradients into the fp32 .grad (read 2 + write 4). A frozen LoRA base is cast
    the same way in every forward but has no weight gradients; a QLoRA base is 4-bit (see _dequant_bytes).
    `fp32_layers_in_row`: the decoder layers' own casts ran inside a float8 row timed at fp32 weights
    (compute_time.fp8_layers_in_row), so only the weights outside them are counted here."""
    if not _fp32_under_autocast(workload, strategy):
        return 0.0
    grads = 6.0 if workload.method == "full" else 0.0
    params = model.params_total - (model.num_layers * model.params_per_layer if fp32_layers_in_row else 0)
    return workload.grad_accum * params * (6.0 * _forward_passes(workload) + grads)


def _fp32_under_autocast(workload: Workload, strategy: str) -> bool:
    """The weights the GEMMs read are fp32 masters autocast casts (DDP with an fp32 load; QLoRA's base is 4-bit)."""
    ddp = catalog.strategy(strategy).framework == "ddp"
    return ddp and workload.load_dtype == "fp32" and workload.method != "qlora"


def _tail_bytes(model: ModelSpec, workload: Workload, placement: Placement, strategy: str) -> float:
    """HBM bytes issued after the last backward kernel: clip_grad_norm_ and the optimizer's update. Every measured
    script ends its step in a host read (train.py's and the plain loop's loss.item(), bench/scripts/trl_sft.py's
    synchronised step ends), so in a host-bound step these run after the host has issued everything else, never
    under its issuing: Mistral-7B's full fine-tune at 1,024 x 1 (222 ms a step, h200-x1-families-hostpaired-2026-12-03)
    prices 68 ms here."""
    tail = _update_bytes(model, workload, placement, strategy) + _clip_bytes(model, workload, placement, strategy)
    return tail + _foreach_extra_bytes(model, workload, placement, strategy)


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
    fused = fitted("compiled_adapter_fused", COMPILED_ADAPTER_FUSED) if workload.layers_compiled else 0.0
    width = lora_params(model, 1, workload.lora_targets)
    return tokens * width * fitted(LORA_BYTES_KEY, LORA_BYTES_PER_TOKEN_WIDTH) * passes * (1 - fused)


def _dequant_bytes(model: ModelSpec, workload: Workload, in_row: bool = False) -> float:
    """QLoRA: every use of a 4-bit weight (each forward, backward) dequantises it; embeddings and lm_head stay fp32.
    `in_row`: the decoder layers (every 4-bit weight) are priced whole from a qlora layer row, which holds this."""
    if workload.method != "qlora" or in_row:
        return 0.0
    quantised = model.params_total - qlora_unquantised_params(model)
    uses = _forward_passes(workload) + 1
    return (
        workload.grad_accum * quantised * uses * fitted("qlora_dequant_bytes_per_param", QLORA_DEQUANT_BYTES_PER_PARAM)
    )


def _deepspeed_s(model: ModelSpec, workload: Workload, strategy: str) -> float:
    """DeepSpeed's fitted overhead beyond the modelled traffic (zero for other strategies)."""
    bparams = model.params_total / 1e9
    stage = catalog.strategy(strategy).zero_stage
    if stage == 3:
        passes = _forward_passes(workload) + 1
        per = fitted("zero3_overhead_s_per_pass_per_bparam", ZERO3_OVERHEAD_S_PER_PASS_PER_BPARAM)
        return per * passes * workload.grad_accum * bparams
    if stage:
        # ZeRO-1 reduces once per optimizer step; ZeRO-2 hooks every micro-step's backward.
        times = 1 if stage == 1 else workload.grad_accum
        return fitted("deepspeed_overhead_s_per_bparam", DEEPSPEED_OVERHEAD_S_PER_BPARAM) * times * bparams
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
    table = table_for(placement.gpu_name, placement.compute)
    s = catalog.strategy(strategy)
    tokens = workload.seq_len * workload.micro_batch * workload.grad_accum
    parts = compute_time(table, model, workload, strategy)
    compute = parts.total_s
    fp32_rows = workload.method == "full" and fp8_layers_in_row(table, model, workload, strategy)
    moved = _cast_bytes(model, workload, strategy, fp32_rows) + _collective_copy_bytes(model, workload, strategy)
    in_row = quantised_layers_in_row(table, model, workload, strategy)
    moved += _adapter_bytes(model, workload) + _dequant_bytes(model, workload, in_row)
    moved += liger_weight_bytes(model, workload, _fp32_under_autocast(workload, strategy))
    in_layers = moved / (table.hbm_gbps * 1e9)
    tail = _tail_bytes(model, workload, placement, strategy) / (table.hbm_gbps * 1e9)
    memory = in_layers + tail + _deepspeed_s(model, workload, strategy)
    # The memory-bound kernels inside the layers (adapters, dequantisation, casts, collective copies) are GPU work
    # issued by the same host: in a host-bound step they run while the host is still issuing, so they add only where
    # the GPU's work passes the host's time. The step's tail (_tail_bytes) never hides so: it is issued after the
    # backward and the step ends in a host read of the loss, so nothing is left to issue under it. DeepSpeed's overhead
    # is its hooks' host time and always adds.
    hidden_memory = min(in_layers, max(parts.host_s - parts.gpu_s, 0.0))
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
    step = compute + memory - hidden_memory + cpu + comm.host_s + exposed + allocator
    tps = tokens / step if step > 0 else 0.0
    mfu = tps * model_flops_per_token(model, workload) / (rates.dense_bf16_tflops * 1e12)
    return Timing(compute, memory, cpu, exposed, step, tps, mfu, allocator, parts, tail)


def model_flops_per_token(model: ModelSpec, workload: Workload) -> float:
    """MFU's numerator (estimate.operators.executed_flops_per_token): the GEMMs the step executes once (a frozen
    base has no weight-gradient GEMMs), the attention scores the mask keeps (causal, inside documents and the window:
    12 FLOPs per key and query channel, forward and backward; not the tiles a kernel computes and throws away), no
    recompute; float8 GEMMs count as the bf16 FLOPs they replace (bf16-equivalent). Never above what the GPU
    executes, so MFU stays under 100%."""
    attention = attention_flops_per_token(model, workload, useful_keys_per_query)
    return executed_flops_per_token(model, workload, attention)
