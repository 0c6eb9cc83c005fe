"""Predicted optimizer-step time: matmul compute + memory-bound passes + CPU optimizer + communication not hidden.

compute  = hardware FLOPs (recompute included) / (dense bf16 peak x SUSTAINED_EFFICIENCY)
memory   = bytes the fused AdamW update, autocast weight casts and collective copies stream through HBM
           / (HBM x HBM_EFFICIENCY)
exposed  = comm - min(overlappable comm, OVERLAP_EFFICIENCY x the compute it can hide behind)
step     = compute + memory + cpu optimizer + host copies + exposed comm
"""

from __future__ import annotations

from dataclasses import dataclass

from generator.estimate.comm import Comm
from generator.estimate.hardware import gpu_rates
from generator.estimate.states import load_bytes, shard_count, trainable_params
from generator.estimate.types import Placement, Workload
from generator.model.sizing import flops_per_token, hardware_flops_per_token
from generator.model.types import ModelSpec

# Fraction of the dense bf16 peak the decoder's matmuls sustain (hardware FLOPs, recompute included).
# Calibrated: one H200, Mistral-7B loaded in bf16, seq 4096, micro-batch 1, full checkpointing, fused AdamW, SDPA,
# measured 0.607 s/step (shared/topo/README.md); minus the predicted 26 ms AdamW pass this leaves 0.581 s for
# 4096 x 65.47 GFLOP. Used for every GPU model and sequence length (short micro-steps run less efficiently: unmodelled).
SUSTAINED_EFFICIENCY = 0.467
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
# DeepSpeed time beyond compute, HBM passes and its collectives, seconds per micro-step per billion parameters (hooks,
# flatten/copy kernels, the un-overlapped reduction epilogue). Fitted to one measurement each on 2x H200 (Mistral-7B,
# bf16 load, seq 4096, checkpointing; tests/test_estimate_gpu.py): ZeRO-1 0.747 s, ZeRO-2 0.744 s, ZeRO-3 1.269 s per
# step against 0.665 / 0.665 / 0.721 s predicted without it. Scaling with parameter count is an assumption.
DEEPSPEED_OVERHEAD_S_PER_BPARAM = {"zero12": 0.011, "zero3": 0.0757}
# DeepSpeed CPU-Adam throughput per machine (parameters updated per second). Assumed from the ZeRO-Offload paper's
# order of magnitude (Ren et al. 2021: CPU-Adam updates ~1e9 params in well under a second on one socket).
CPU_ADAM_PARAMS_PER_S = 2e9
# Fused AdamW traffic per parameter, beyond the states: read grad; read+write param, m and v.
_ADAM_PASSES = 2


@dataclass(frozen=True)
class Timing:
    compute_s: float
    """Matmul time of all micro-steps (recompute included)."""
    memory_s: float
    """HBM-bound passes (optimizer update, autocast casts, collective copies) and DeepSpeed's fitted overhead."""
    cpu_s: float
    """CPU optimizer time (offload)."""
    exposed_comm_s: float
    """Collective time not hidden behind compute."""
    step_s: float
    """Optimizer-step time: the sum of the above plus host copies."""
    tokens_per_s_per_gpu: float
    mfu: float
    """Model FLOPs (6N + 12*L*h*s) per second over the dense bf16 peak."""


def _update_bytes(model: ModelSpec, workload: Workload, placement: Placement, strategy: str) -> float:
    """HBM bytes of one optimizer update on one GPU (zero when the optimizer runs on the CPU)."""
    if strategy.endswith("_offload"):
        return 0.0
    t = trainable_params(model, workload)
    state = 2.0 if workload.optimizer == "adamw8bit" else None
    if strategy == "ddp":
        wb = load_bytes(workload) if workload.method == "full" else 4
        return t * (_ADAM_PASSES * wb + wb + _ADAM_PASSES * (state or 2 * wb))
    # fp32 master + fp32 grad + states, plus the bf16 grad -> fp32 and fp32 -> bf16 parameter conversions.
    n = shard_count(strategy, placement)
    return t * (_ADAM_PASSES * 4 + 4 + _ADAM_PASSES * (state or 8) + 6) / n


def _cast_bytes(model: ModelSpec, workload: Workload, strategy: str) -> float:
    """fp32 weights under autocast (DDP): each forward (and recompute) casts them to bf16 (read 4 + write 2 bytes),
    and backward casts the bf16 weight gradients into the fp32 .grad (read 2 + write 4)."""
    if strategy != "ddp" or workload.load_dtype != "fp32" or workload.method != "full":
        return 0.0
    passes = 2 if workload.grad_checkpointing else 1
    return workload.grad_accum * model.params_total * (6.0 * passes + 6.0)


def _collective_copy_bytes(model: ModelSpec, workload: Workload, strategy: str) -> float:
    """Copy-in/copy-out and dtype casts around the all-gathers and reduce-scatters of sharded parameters."""
    gathers = {"fsdp": 2, "hsdp": 2, "fsdp_grad_op": 1, "zero3": 2, "zero3_offload": 2}.get(strategy)
    if gathers is None:
        return 0.0
    reduces = 1 if strategy in ("fsdp", "hsdp", "fsdp_grad_op") else workload.grad_accum
    return model.params_total * (gathers * workload.grad_accum * GATHER_COPY_BYTES + reduces * REDUCE_COPY_BYTES)


def step_timing(model: ModelSpec, workload: Workload, placement: Placement, strategy: str, comm: Comm) -> Timing:
    rates = gpu_rates(placement.gpu_name)
    tokens = workload.seq_len * workload.micro_batch * workload.grad_accum
    hw = hardware_flops_per_token(model, workload.seq_len, workload.grad_checkpointing) * tokens
    if workload.method != "full":
        # Frozen weights need no weight gradients: backward does the input-gradient half only (4N instead of 6N).
        hw *= 4.0 / 6.0 if not workload.grad_checkpointing else 6.0 / 8.0
    compute = hw / (rates.dense_bf16_tflops * 1e12 * SUSTAINED_EFFICIENCY)
    moved = _update_bytes(model, workload, placement, strategy) + _cast_bytes(model, workload, strategy)
    moved += _collective_copy_bytes(model, workload, strategy)
    memory = moved / (rates.hbm_tbps * 1e12 * HBM_EFFICIENCY)
    cpu = 0.0
    if strategy.startswith("zero"):
        family = "zero3" if strategy.startswith("zero3") else "zero12"
        # ZeRO-1 reduces once per optimizer step; ZeRO-2/3 hook every micro-step's backward.
        times = 1 if strategy == "zero1" else workload.grad_accum
        memory += DEEPSPEED_OVERHEAD_S_PER_BPARAM[family] * times * model.params_total / 1e9
    if strategy.endswith("_offload"):
        cpu = trainable_params(model, workload) / (placement.num_machines * CPU_ADAM_PARAMS_PER_S)
    # DDP buckets fire during backward (2/3 of a step, 3/4 with recompute); sharded gathers span the whole step.
    window = compute * ((0.75 if workload.grad_checkpointing else 2 / 3) if strategy == "ddp" else 1.0)
    overlap = OVERLAP_EFFICIENCY["ddp" if strategy == "ddp" else "sharded"]
    hidden = min(comm.overlappable_s, overlap * window)
    exposed = max(0.0, comm.seconds - hidden)
    step = compute + memory + cpu + comm.host_s + exposed
    tps = tokens / step if step > 0 else 0.0
    mfu = tps * flops_per_token(model, workload.seq_len) / (rates.dense_bf16_tflops * 1e12)
    return Timing(compute, memory, cpu, exposed, step, tps, mfu)
