"""Assemble one Estimate per strategy: memory at each training phase (peak = the worst), reserved, fit, time."""

from __future__ import annotations

from generator.catalog import strategies as catalog
from generator.estimate.activations import activation_terms
from generator.estimate.attention_rates import (
    HEAD_DIM_NOTE,
    MATH_KERNEL_NOTE,
    MATH_WHY,
    priced_path,
    unmeasured_head_dim,
)
from generator.estimate.comm import communication
from generator.estimate.compute_source import table_for, table_note
from generator.estimate.compute_table import ComputeTable
from generator.estimate.hardware import gpu_known
from generator.estimate.host_time import priced_as_mistral
from generator.estimate.layer_rows import (
    FP8_OPERATORS_NOTE,
    MOE_OPERATORS_NOTE,
    fp8_layers_in_row,
    moe_priced_by_operators,
)
from generator.estimate.layer_saved import residual_bytes
from generator.estimate.loss import LOSS_BACKWARD_BYTES
from generator.estimate.moe import is_moe, mlp_element_bytes
from generator.estimate.precision import transient_fp8_bytes
from generator.estimate.scripts import liger_fused_loss, script_facts
from generator.estimate.states import PHASES, cpu_bytes_per_machine, model_states
from generator.estimate.timing import step_timing
from generator.estimate.types import METHODS, STRATEGIES, Estimate, Placement, Workload
from generator.model.types import ModelSpec

# max_memory_reserved / max_memory_allocated, by strategy family and (with, without) activation checkpointing.
# Measured by tests/test_estimate_gpu.py on H200s (Mistral-7B, seq 4096 unless noted, micro-batch 1):
#   single process: 1.017 (bf16 load), 1.038 (fp32 load); without checkpointing 1.110 (seq 2048); DDP on 2: 1.023
#   FSDP2 on 2 GPUs: 1.073; without checkpointing 1.234; without reshard after forward 1.285 (unsharded layers
#   gathered in forward and freed one by one in backward leave holes)
#   DeepSpeed on 2 GPUs: ZeRO-1 and ZeRO-2 1.250 (the step's flat gradient copies), ZeRO-3 1.149
# train.py on 2x H200 (fp32 load, bench/results/h200-x2-2026-11-30.json), without checkpointing: DDP one GPU 1.082,
#   FSDP2 1.239, FSDP2 without reshard 1.197-1.199 (all activations freed in one backward leave fewer holes than the
#   checkpointed case's per-layer regathers), ZeRO-1 1.306, ZeRO-3 1.108.
# QLoRA has no row of its own. Its former 0.21 / 0.29 came from a random init that built the whole bf16 model on the
#   GPU and quantised it after (1.21-1.30x); train.py now quantises layer by layer (training/qlora.py) and
#   from_pretrained quantises weight by weight as it loads, which leave the DDP rows' holes: 1.02-1.06x on the QLoRA
#   rows measured since (bench/REPORT.md), the same allocation pattern as any DDP LoRA step.
# ZeRO-1/2 without checkpointing: 0.25 splits the matrix's ZeRO-1 (1.303) and ZeRO-2 (1.204) rows (-4% / +4%) once
#   dense SDPA's per-layer mask bias (1.1 GB at seq 4096) is counted in the allocated peak.
FRAGMENTATION = {
    "ddp": (0.03, 0.11),
    "fsdp": (0.075, 0.235),
    "fsdp_grad_op": (0.285, 0.20),
    "zero12": (0.25, 0.25),
    "zero3": (0.15, 0.11),
    # DDP where the LM head never builds the logits (TRL's chunked loss, Liger's fused linear cross-entropy under
    # LoRA/QLoRA): without checkpointing 0.022, minimax on TRL's CLI fit rows (LoRA all-linear, seq 4096,
    # micro-batch 2, no checkpointing, with and without Liger: reserved 1.023x and 1.021x the predicted peak;
    # bench/results/h200-x1-trl-cli-2026-12-01.json), where train.py's logits-sized blocks leave 0.11; with
    # checkpointing DDP's own 0.03.
    "fused_head_ddp": (0.03, 0.022),
}
# Reserved memory beyond the allocated bytes at the start of backward, where the loss builds logits-sized blocks
# (neither Liger's fused loss nor TRL's chunked head): freed, they stay cached and are split by the layers' backward,
# whose F-wide MLP intermediates (gate, up, the activation, their product and gradients, in the MLP's dtype,
# moe.mlp_element_bytes; for an MoE the tokens one expert sees, tokens x top-k / experts) then leave holes no later
# request fits. reserved = the larger of the fragmentation factor above on the peak and this term over the allocation
# at the start of backward. DDP and DeepSpeed: MLP_HOLES F-wide intermediates per token. Minimax on the fit rows where
# the term binds (1x H200 Mistral-7B LoRA and QLoRA with checkpointing at 4,096-32,768 tokens, the matrix's fp32 LoRA
# rows; bench/REPORT.md): 9 puts the twelve within 5.3% (8: 6.7%, 10: 6.2%). It replaced, on 2026-12-03, a term per
# vocabulary entry (0.75 x the loss's 12 B per token and entry, fitted on the same 32k-vocabulary rows, where the two
# cannot be told apart), which put three unseen QLoRA rows 13-18% high or low: their holes were 9.5-10.5 GB whether
# the vocabulary had 32k, 128k or 152k entries (Llama-2-13B, Llama-3-8B, Qwen2.5-7B); those rows showed the form, so
# they no longer check it blind. FSDP2 keeps a pool of its own for its all-gather stream: 2.65 per GB of the loss's
# blocks (activations.LOSS_BACKWARD_BYTES per token and vocabulary entry), from its one long-sequence row (LoRA
# s16384, 46.6 GB reserved on 29.3 allocated).
MLP_HOLES = 9.0
FSDP_LOSS_RESERVE = 2.65
# Outside the allocator entirely (max_memory_allocated never sees them), but they take GPU memory:
CUDA_CONTEXT_GB = 0.6  # CUDA context + cuBLAS/cuDNN workspaces with lazy module loading (predicted)
NCCL_BUFFERS_GB = 0.5  # NCCL channel buffers per process in a multi-GPU job (predicted)


def _fragmentation_family(strategy: str, workload: Workload) -> str:
    """The FRAGMENTATION row measured for this kind of allocation pattern."""
    s = catalog.strategy(strategy)
    if s.framework == "deepspeed":
        return "zero3" if s.zero_stage == 3 else "zero12"
    if s.framework == "fsdp":
        return "fsdp" if s.reshard_after_forward else "fsdp_grad_op"
    if script_facts(workload.script).fused_lm_head:
        return "fused_head_ddp"
    # Liger's fused loss leaves out the logits' blocks too, but a full fine-tune's holes come from its fp32 gradient
    # and optimizer allocations: train.py's Liger full fine-tunes reserve 1.12-1.16x with or without checkpointing.
    return "fused_head_ddp" if liger_fused_loss(workload) and workload.method != "full" else "ddp"


def _loss_fused(workload: Workload) -> bool:
    """Neither Liger's fused cross-entropy nor TRL's chunked LM head allocates logits-sized loss blocks to cache."""
    return liger_fused_loss(workload) or script_facts(workload.script).fused_lm_head


def applicable(strategy: str, workload: Workload, placement: Placement) -> str | None:
    """None when `strategy` can run this workload on this placement, else the reason it cannot (one line).

    One GPU: `ddp` means plain single-process training. DeepSpeed and FSDP still run on one GPU and keep fp32
    master weights, so zero2, the offload variants and fsdp stay; zero1/zero3/fsdp_grad_op would only repeat them."""
    if not catalog.is_known(strategy):
        return f"unknown strategy '{strategy}' (one of {', '.join(STRATEGIES)})"
    if workload.method not in METHODS:
        return f"unknown method '{workload.method}' (one of {', '.join(METHODS)})"
    s = catalog.strategy(strategy)
    if workload.method == "qlora" and s.framework != "ddp":
        return "QLoRA's 4-bit base is trained here under DDP (or one GPU) only"
    n = placement.num_gpus
    if n == 1 and s.one_gpu_twin:
        return f"on one GPU nothing is sharded: {strategy} keeps the same states as {s.one_gpu_twin}"
    if s.hybrid:
        shard = placement.shard_size or placement.num_gpus_per_machine
        if n == 1 or shard >= n:
            return "HSDP needs at least two shard groups (one group is plain FSDP)"
        if shard < 2 or n % shard:
            return f"HSDP shard size {shard} must be at least 2 and divide the {n} GPUs"
    if placement.num_machines > 1 and not placement.inter_node_gbps:
        return "several machines need the inter-node bandwidth (Placement.inter_node_gbps)"
    return None


def _memory(model: ModelSpec, workload: Workload, placement: Placement, strategy: str) -> tuple[str, dict, float]:
    """(peak phase, its breakdown in GB, GB allocated at the start of backward: the loss's phase)."""
    states = model_states(model, workload, placement, strategy)
    acts = activation_terms(model, workload, strategy)
    phases = {ph: {**states[ph], **acts[ph]} for ph in PHASES}
    if workload.precision == "fp8":  # one Linear's fp8 weight and transpose, in every phase that runs GEMMs
        for ph in PHASES:
            phases[ph]["fp8_weight_copies"] = transient_fp8_bytes(model)
    worst = max(PHASES, key=lambda ph: sum(phases[ph].values()))
    return worst, {k: v / 1e9 for k, v in phases[worst].items() if v > 0}, sum(phases["backward_start"].values()) / 1e9


def reserved_gb(model: ModelSpec, workload: Workload, strategy: str, peak_gb: float, loss_phase_gb: float) -> float:
    """Predicted max_memory_reserved: fragmentation on the peak, or the holes the loss's cached blocks leave."""
    with_ckpt, without = FRAGMENTATION[_fragmentation_family(strategy, workload)]
    fragmented = peak_gb * (1 + (with_ckpt if workload.grad_checkpointing else without))
    return max(fragmented, loss_phase_gb + _loss_holes_gb(model, workload, strategy))


def _loss_holes_gb(model: ModelSpec, workload: Workload, strategy: str) -> float:
    """GB reserved beside the allocation at the start of backward (MLP_HOLES, FSDP_LOSS_RESERVE)."""
    if _loss_fused(workload):
        return 0.0
    tokens = workload.seq_len * workload.micro_batch
    if catalog.strategy(strategy).framework == "fsdp":
        return FSDP_LOSS_RESERVE * LOSS_BACKWARD_BYTES * model.vocab_size * tokens / 1e9
    if is_moe(model):
        tokens = tokens * model.experts_per_token / model.num_experts
    element = mlp_element_bytes(workload.method, residual_bytes(workload, strategy))
    return MLP_HOLES * tokens * model.intermediate_size * element / 1e9


def _notes(model: ModelSpec, workload: Workload, placement: Placement, strategy: str, phase: str,
           table: ComputeTable, by_operators: bool) -> list[str]:  # fmt: skip
    notes = [f"peak in {phase.replace('_', ' ')}"]
    s = catalog.strategy(strategy)
    if s.framework == "ddp" and workload.method == "full":
        if workload.load_dtype == "fp32":
            notes.append(
                "fp32 weights under bf16 autocast: 16 B/param"
                + (" + 4 B bucket" if placement.num_gpus > 1 and not workload.grad_as_bucket_view else "")
            )
        else:
            notes.append("bf16 weights without fp32 master: small updates are lost")
    if s.framework == "fsdp" and workload.grad_accum > 1:
        notes.append("Accelerate's no_sync keeps unsharded bf16 grads during accumulation")
    if s.zero_stage in (1, 2) and placement.num_gpus > 1:
        notes.append("DeepSpeed stage 1/2 does not overlap reductions by default (overlap_comm=false)")
    if workload.precision == "fp8" and fp8_layers_in_row(table, model, workload, strategy):
        notes.append(f"fp8 (torchao float8 Linears): decoder layers priced from {model.name}'s own float8 layer rows")
    elif workload.precision == "fp8":
        notes.append(FP8_OPERATORS_NOTE.format(model=model.name))
    if workload.mixed_precision != "bf16":
        notes.append("only bf16 mixed precision is modelled: memory and time assume it")
    if placement.num_gpus > 1 and not placement.busbw_gbps:
        notes.append("no bus bandwidth given for these GPUs: communication time unknown")
    if not gpu_known(placement.gpu_name):
        notes.append(f"'{placement.gpu_name}' not in the GPU catalog: speed is a rough guess")
    speed = table_note(table, placement.gpu_name)
    if speed:
        notes.append(speed)
    if by_operators:
        notes.append(MOE_OPERATORS_NOTE.format(model=model.name))
    _, why = priced_path(table, model, workload)
    if why is not None:
        notes.append(MATH_KERNEL_NOTE.format(model=model.name, why=MATH_WHY[why].format(model=model.name)))
    width = unmeasured_head_dim(table, model.head_dim)
    if width is not None:
        notes.append(HEAD_DIM_NOTE.format(dim=model.head_dim, width=width, model=model.name))
    return notes


def estimate(
    model: ModelSpec, workload: Workload, placement: Placement, strategy: str, headroom: float = 0.10
) -> Estimate:
    """Memory, communication and time of `strategy` for this model/workload/placement (all predicted)."""
    phase, breakdown, loss_phase = _memory(model, workload, placement, strategy)
    peak = sum(breakdown.values())
    reserved = reserved_gb(model, workload, strategy, peak, loss_phase)
    outside = CUDA_CONTEXT_GB + (NCCL_BUFFERS_GB if placement.num_gpus > 1 else 0.0)
    capacity = placement.gpu_memory_gb * (1 - headroom) - outside
    comm = communication(model, workload, placement, strategy)
    timing = step_timing(model, workload, placement, strategy, comm, reserved_gb=reserved)
    table = table_for(placement.gpu_name, placement.compute)
    by_operators = moe_priced_by_operators(table, model, workload, strategy)
    return Estimate(
        strategy=strategy,
        fits=reserved <= capacity,
        peak_gb=peak,
        reserved_gb=reserved,
        breakdown=breakdown,
        capacity_gb=capacity,
        comm_gb_per_step=(comm.bus_bytes + comm.host_bytes) / 1e9,
        comm_s=comm.seconds + comm.host_s,
        compute_s=timing.compute_s,
        step_s=timing.step_s,
        tokens_per_s_per_gpu=timing.tokens_per_s_per_gpu,
        mfu=timing.mfu,
        cpu_gb=cpu_bytes_per_machine(model, workload, placement, strategy) / 1e9,
        notes=tuple(_notes(model, workload, placement, strategy, phase, table, by_operators)),
        gpu_work_s=timing.parts.gpu_s if timing.parts else 0.0,
        host_s=timing.parts.host_s if timing.parts else 0.0,
        tail_s=timing.tail_s,
        layers_from_operators=by_operators,
        host_as_mistral=priced_as_mistral(table, model),
    )


def estimate_all(
    model: ModelSpec,
    workload: Workload,
    placement: Placement,
    strategies: tuple[str, ...] = STRATEGIES,
    headroom: float = 0.10,
) -> list[Estimate]:
    """One Estimate per applicable strategy, in the order given."""
    return [
        estimate(model, workload, placement, s, headroom)
        for s in strategies
        if applicable(s, workload, placement) is None
    ]
