"""Predicted optimizer-step time: operator compute, memory-bound passes, CPU optimizer, exposed communication.

compute  = each GEMM at its measured rate by shape and dtype + MoE grouped GEMMs + attention by kernel path +
           the elementwise chain and float8 casts at measured memory rates (estimate.compute_time; recompute included;
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
from generator.estimate.compute_time import ComputeTime, compute_time, forward_passes
from generator.estimate.hardware import gpu_rates
from generator.estimate.layer_rows import fp8_layers_in_row, quantised_layers_in_row
from generator.estimate.operators import executed_flops_per_token
from generator.estimate.passes import liger_weight_bytes
from generator.estimate.states import trainable_params
from generator.estimate.step_traffic import (
    adapter_bytes,
    cast_bytes,
    collective_copy_bytes,
    dequant_bytes,
    fp32_under_autocast,
    tail_bytes,
)
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
    """The part of memory_s issued after the backward (clip and the optimizer's update, tail_bytes), which a
    host-bound step adds to the host's time."""


def _deepspeed_s(model: ModelSpec, workload: Workload, strategy: str) -> float:
    """DeepSpeed's fitted overhead beyond the modelled traffic (zero for other strategies)."""
    bparams = model.params_total / 1e9
    stage = catalog.strategy(strategy).zero_stage
    if stage == 3:
        passes = forward_passes(workload) + 1
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
    moved = cast_bytes(model, workload, strategy, fp32_rows) + collective_copy_bytes(model, workload, strategy)
    in_row = quantised_layers_in_row(table, model, workload, strategy)
    moved += adapter_bytes(model, workload) + dequant_bytes(model, workload, in_row)
    moved += liger_weight_bytes(model, workload, fp32_under_autocast(workload, strategy))
    in_layers = moved / (table.hbm_gbps * 1e9)
    tail = tail_bytes(model, workload, placement, strategy) / (table.hbm_gbps * 1e9)
    memory = in_layers + tail + _deepspeed_s(model, workload, strategy)
    # The memory-bound kernels inside the layers (adapters, dequantisation, casts, collective copies) are GPU work
    # issued by the same host: in a host-bound step they run while the host is still issuing, so they add only where
    # the GPU's work passes the host's time. The step's tail (tail_bytes) never hides so: it is issued after the
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
