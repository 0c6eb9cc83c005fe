"""Predicted optimizer-step time: matmul compute + memory-bound passes + CPU optimizer + communication not hidden.

compute  = hardware FLOPs (recompute included) / (dense bf16 peak x SUSTAINED_EFFICIENCY)
memory   = bytes the fused AdamW update and autocast weight casts stream through HBM / (HBM x HBM_EFFICIENCY)
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
# Share of the compute window that overlappable communication actually hides, per strategy family.
# DDP: predicted (the Reducer's buckets all-reduce during backward; the last bucket is exposed).
# Sharded (FSDP2, ZeRO-3): 0, fitted to FSDP2 on 2x H200 under Accelerate (issue 5 reference points: 0.747 s/step with
# checkpointing, 0.62 s without, 0.953 s with Liger at micro-batch 2): each step ran 50-150 ms longer than compute +
# optimizer, about the full all-gather + reduce-scatter time (64 ms at 338 GB/s), so none of it was hidden.
OVERLAP_EFFICIENCY = {"ddp": 0.5, "sharded": 0.0}
# DeepSpeed CPU-Adam throughput per machine (parameters updated per second). Assumed from the ZeRO-Offload paper's
# order of magnitude (Ren et al. 2021: CPU-Adam updates ~1e9 params in well under a second on one socket).
CPU_ADAM_PARAMS_PER_S = 2e9
# Fused AdamW traffic per parameter, beyond the states: read grad; read+write param, m and v.
_ADAM_PASSES = 2


@dataclass(frozen=True)
class Timing:
    compute_s: float
    memory_s: float
    cpu_s: float
    exposed_comm_s: float
    step_s: float
    tokens_per_s_per_gpu: float
    mfu: float


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


def step_timing(model: ModelSpec, workload: Workload, placement: Placement, strategy: str, comm: Comm) -> Timing:
    rates = gpu_rates(placement.gpu_name)
    tokens = workload.seq_len * workload.micro_batch * workload.grad_accum
    hw = hardware_flops_per_token(model, workload.seq_len, workload.grad_checkpointing) * tokens
    if workload.method != "full":
        # Frozen weights need no weight gradients: backward does the input-gradient half only (4N instead of 6N).
        hw *= 4.0 / 6.0 if not workload.grad_checkpointing else 6.0 / 8.0
    compute = hw / (rates.dense_bf16_tflops * 1e12 * SUSTAINED_EFFICIENCY)
    memory = (_update_bytes(model, workload, placement, strategy) + _cast_bytes(model, workload, strategy)) / (
        rates.hbm_tbps * 1e12 * HBM_EFFICIENCY
    )
    cpu = 0.0
    if strategy.endswith("_offload"):
        cpu = trainable_params(model, workload) / (placement.num_machines * CPU_ADAM_PARAMS_PER_S)
    # DDP buckets fire during backward (2/3 of a step, 3/4 with recompute); sharded gathers span the whole step.
    window = compute * ((0.75 if workload.grad_checkpointing else 2 / 3) if strategy == "ddp" else 1.0)
    hidden = min(comm.overlappable_s, OVERLAP_EFFICIENCY["ddp" if strategy == "ddp" else "sharded"] * window)
    exposed = max(0.0, comm.seconds - hidden)
    step = compute + memory + cpu + comm.host_s + exposed
    tps = tokens / step if step > 0 else 0.0
    mfu = tps * flops_per_token(model, workload.seq_len) / (rates.dense_bf16_tflops * 1e12)
    return Timing(compute, memory, cpu, exposed, step, tps, mfu)
