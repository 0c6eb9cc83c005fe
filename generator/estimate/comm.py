"""Bytes each GPU moves per optimizer step, and how long that takes on the placement's links.

Volumes are "bus bytes" (nccl-tests doc/PERFORMANCE.md): a ring all-reduce of S bytes over n GPUs sends
S x 2(n-1)/n per GPU, a reduce-scatter or all-gather S x (n-1)/n, so time = bus bytes / busbw.
When each collective runs, under Accelerate's accumulate() with k micro-steps per optimizer step:
- DDP: one gradient all-reduce per step (no_sync on the other micro-steps), in the parameters' dtype.
- ZeRO-1: reduce at the accumulation boundary only, then all-gather of the updated bf16 partitions.
- ZeRO-2/3: DeepSpeed reduces gradients every micro-step (engine.allreduce_gradients, partitioned gradients);
  ZeRO-3 also all-gathers parameters for forward and again for backward every micro-step.
- FSDP2: all-gathers per micro-step (twice with reshard after forward, once without); Accelerate's no_sync keeps
  unsharded grads, so the reduce-scatter happens once per step. HSDP: the same inside a shard group, plus an
  all-reduce of each shard across the replicas.
- Offload: gradient partitions go to the host and updated parameters come back over PCIe (host_gbps);
  ZeRO-3 parameter offload also fetches each partition for every all-gather.
"""

from __future__ import annotations

from dataclasses import dataclass

from generator.catalog import strategies as catalog
from generator.estimate.precision import fp8_weight_params
from generator.estimate.states import load_bytes, shard_count, trainable_params
from generator.estimate.types import Placement, Workload
from generator.model.types import ModelSpec


@dataclass(frozen=True)
class Comm:
    bus_bytes: float
    """Bytes each GPU sends per optimizer step over GPU links."""
    seconds: float
    """Time those collectives take at the placement's bus bandwidth (before overlap)."""
    overlappable_s: float
    """Part of `seconds` that runs concurrently with forward/backward compute."""
    host_bytes: float = 0.0
    """Bytes each GPU copies to/from the host per optimizer step (offload)."""
    host_s: float = 0.0


def _ring(n: int) -> float:
    return (n - 1) / n if n > 1 else 0.0


def _bandwidth(placement: Placement) -> float:
    """Bottleneck bus bandwidth of the whole job (the slower of intra-machine and inter-machine)."""
    bw = placement.busbw_gbps or 0.0
    if placement.num_machines > 1 and placement.inter_node_gbps:
        bw = min(bw, placement.inter_node_gbps) if bw else placement.inter_node_gbps
    return bw


# Placement bandwidths are all-reduce bus bandwidths; all-gather and reduce-scatter reach less of the link. Measured
# on 2x H200 SXM (bench/results/probe-h200x2.json, bf16, NCCL 2.28): 282.7 and 274.7 vs 339.3 GB/s at 2 GB messages,
# 268 and 263 vs 331 at 1 GB.
GATHER_SCATTER_EFFICIENCY = 0.82


def collective_seconds(bus_bytes: float, gbps: float, gather_scatter: bool = True) -> float:
    """Seconds for `bus_bytes` of all-gather/reduce-scatter traffic (or all-reduce with gather_scatter=False)."""
    if bus_bytes <= 0:
        return 0.0
    if gbps <= 0:
        return float("inf")
    return bus_bytes / (gbps * 1e9 * (GATHER_SCATTER_EFFICIENCY if gather_scatter else 1.0))


def communication(model: ModelSpec, workload: Workload, placement: Placement, strategy: str) -> Comm:
    n = placement.num_gpus
    if n <= 1:
        return Comm(0.0, 0.0, 0.0)
    s = catalog.strategy(strategy)
    p = float(trainable_params(model, workload))
    # FSDP2 and ZeRO-3 shard every parameter, the frozen base of LoRA too, and gather all of them for each pass;
    # only the trained ones have gradients to reduce (and, for ZeRO-1/2, partitions to gather back)
    gathered = float(model.params_total) if s.shards_parameters else p
    k = workload.grad_accum
    bw = _bandwidth(placement)
    ring = _ring(n)
    if s.framework == "ddp":
        grad_bytes = load_bytes(workload) if workload.method == "full" else 4
        b = p * grad_bytes * 2 * ring
        t = collective_seconds(b, bw, gather_scatter=False)
        return Comm(b, t, t)
    if s.framework == "fsdp":
        gathers = s.gathers_per_micro_step
        if s.hybrid:
            return _hsdp(p, gathered, k, placement, gathers, shard_count(strategy, placement))
        ag, rs = gathers * k * _gather_bytes(model, workload, gathered) * ring, 2 * p * ring
        return Comm(ag + rs, collective_seconds(ag + rs, bw), collective_seconds(ag + rs, bw))
    if s.framework == "deepspeed":
        stage = s.zero_stage
        reduces = 1 if stage == 1 else k
        rs = reduces * 2 * p * ring
        ag = (2 * k * 2 * gathered if stage == 3 else 2 * p) * ring
        overlapped = rs + ag if stage == 3 else 0.0  # overlap_comm defaults to True only for stage 3
        host, host_s = _offload_host(p, k, n, s, placement)
        return Comm(rs + ag, collective_seconds(rs + ag, bw), collective_seconds(overlapped, bw), host, host_s)
    raise ValueError(f"unknown strategy {strategy}")


def _gather_bytes(model: ModelSpec, workload: Workload, p: float) -> float:
    """Bytes all-gathered per pass: bf16 parameters, the float8 Linears' in fp8 under FSDP2's float8 all-gather
    (estimate.precision; accelerate's AORecipeKwargs turns it on)."""
    if workload.precision != "fp8" or workload.method != "full":
        return 2 * p
    return 2 * p - fp8_weight_params(model)


def _hsdp(p: float, gathered: float, k: int, placement: Placement, gathers: int, m: int) -> Comm:
    """FSDP inside each shard group of `m` GPUs, then an all-reduce of each (trained) shard across the replicas."""
    replicas = placement.num_gpus // m
    inner = gathers * k * 2 * gathered * _ring(m) + 2 * p * _ring(m)
    across = (2 * p / m) * 2 * _ring(replicas)
    inner_bw = placement.shard_busbw_gbps or placement.busbw_gbps
    across_bw = _bandwidth(placement)
    t = collective_seconds(inner, inner_bw) + collective_seconds(across, across_bw, gather_scatter=False)
    return Comm(inner + across, t, collective_seconds(inner, inner_bw))


def _offload_host(p: float, k: int, n: int, s: catalog.Strategy, placement: Placement) -> tuple[float, float]:
    """Host traffic per GPU: fp32 gradient partition out each micro-step, bf16 parameters back once per step,
    and with parameter offload each partition fetched for every all-gather."""
    if s.offload == "none":
        return 0.0, 0.0
    part = p / n
    host = k * 4 * part + 2 * part
    if s.offloads_params:
        host += 2 * k * 2 * part
    return host, host / (placement.host_gbps * 1e9)


def comm_gb(comm: Comm) -> float:
    return comm.bus_bytes / 1e9


__all__ = ["Comm", "comm_gb", "communication", "shard_count"]
