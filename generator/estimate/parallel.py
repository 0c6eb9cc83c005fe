"""Tensor and context parallelism over FSDP2 (accelerate 1.15 `parallelism_config`): memory, traffic and time.

All predicted; nothing here has been measured on GPUs yet. How each term is counted, and from where:
- Tensor parallel (transformers' Llama/Mistral `tp_plan`: q/k/v, gate/up column-wise, o/down row-wise, lm_head
  column-wise with its output gathered; embeddings and RMSNorms replicated). Each rank holds 1/tp of every decoder
  linear and of lm_head, so one TP rank is priced as a model with heads, key/value heads and the MLP width divided by
  tp (`tp_shard_model`). Activations follow: inside attention and the MLP they split by tp; the norms, the residual
  stream, the checkpoints and the logits (gathered) stay whole, since transformers' plan has no sequence-parallel
  norms (Korthikanti et al. 2022, arXiv:2205.05198, Table 2: sbh(10 + 24/t) without sequence parallelism).
  Traffic: two all-reduces of the [b, s, h] activations per layer in forward and two in backward (Shoeybi et al.
  2019, Megatron-LM, arXiv:1909.08053 section 3), two more per recomputed forward; plus lm_head's gather of the logits
  and the all-reduce of its input gradient. They sit on the critical path: none is overlapped.
- Context parallel (torch `context_parallel`, the default all-gather rotation accelerate 1.15 sets with
  `cp_comm_strategy: allgather`; torch docs "Context Parallel" tutorial). The sequence is split in cp chunks (with
  torch's head-tail load balancing for causal masks), so every activation term follows s/cp, but each rank's queries
  still meet all earlier keys: its attention work is the whole sequence's over cp, not the chunk's own. Per layer and
  forward pass each rank all-gathers the other chunks' keys and values; backward gathers them again and
  reduce-scatters their gradients (Liu et al. 2023, Ring Attention, arXiv:2310.01889, for the per-layer key/value
  passes). The gathered K/V of one layer, and in backward their fp32 gradient buffers, are the exchange buffers.
- DeepSpeed-Ulysses sequence parallel (Jacobs et al. 2023, arXiv:2309.14509; ALST, arXiv:2506.13996): four
  all-to-alls per layer forward (q, k, v in, the output back) and four backward. Priced by `ulysses_bus_bytes` for
  the comparison; the planner does not emit it (train.py does not run DeepSpeed's sequence-parallel data path).
FSDP2 shards over `dp_shard x cp` (accelerate's flattened `dp_shard_cp` mesh), each rank's 1/tp slice.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from generator.estimate.attention import attention_flops_per_token, documents
from generator.estimate.attention_rates import attention_tflops, priced_path
from generator.estimate.comm import collective_seconds
from generator.estimate.compute_source import table_for
from generator.estimate.compute_table import ComputeTable
from generator.estimate.core import estimate
from generator.estimate.hardware import gpu_rates
from generator.estimate.timing import model_flops_per_token
from generator.estimate.types import Estimate, Placement, Workload
from generator.model.types import ModelSpec

ACT_BYTES = 2
"""bf16 activations and their gradients on the wire."""
CP_GRAD_BYTES = 4
"""torch's ring attention accumulates the gathered keys' and values' gradients in fp32 before the reduce-scatter."""


@dataclass(frozen=True)
class Layout:
    """How the processes of one job split into groups: dp_replicate x dp_shard x cp x tp (accelerate's mesh order,
    tp innermost: a TP group is tp consecutive ranks, a CP group cp ranks tp apart)."""

    tp: int = 1
    """Tensor-parallel group size."""
    cp: int = 1
    """Context-parallel group size (the sequence is split in cp chunks)."""
    dp_shard: int = 1
    """FSDP2 shard-group size besides cp (FSDP shards over dp_shard x cp)."""
    dp_replicate: int = 1
    """Replicas of the sharded model (HSDP); the planner keeps it 1."""
    tp_busbw_gbps: float = 0.0
    """All-reduce bus bandwidth inside one TP group (the slowest group)."""
    cp_busbw_gbps: float = 0.0
    """All-reduce bus bandwidth inside one CP group (the slowest group)."""
    fsdp_busbw_gbps: float = 0.0
    """All-reduce bus bandwidth of one FSDP group (dp_shard x cp ranks)."""

    @property
    def size(self) -> int:
        """Processes the layout needs."""
        return self.dp_replicate * self.dp_shard * self.cp * self.tp

    @property
    def data_parallel(self) -> int:
        """Groups that train different sequences (each micro-batch is shared by one TP x CP group)."""
        return self.dp_replicate * self.dp_shard

    @property
    def label(self) -> str:
        """The layout's factors, whose product is its GPU count ("TP 2 x FSDP 4"); with context parallelism FSDP
        shards over the CP ranks too, which is said apart ("TP 2 x CP 4, FSDP over 4") so that it does not read as
        one more factor."""
        parts = [f"TP {self.tp}"] * (self.tp > 1)
        if self.cp == 1:
            return " x ".join([*parts, f"FSDP {self.dp_shard}"])
        parts += [f"CP {self.cp}"] + [f"DP {self.dp_shard}"] * (self.dp_shard > 1)
        return f"{' x '.join(parts)}, FSDP over {self.dp_shard * self.cp}"


def tp_shard_model(model: ModelSpec, tp: int) -> ModelSpec:
    """One TP rank's share of the model, as the estimator sees a model: decoder linears and lm_head split by tp,
    embeddings and norms whole (the vocabulary stays whole: the logits are gathered)."""
    if tp == 1:
        return model
    lm_head = 0 if model.tie_embeddings else model.vocab_size * model.hidden_size
    layers = model.num_layers * model.params_per_layer
    replicated = model.params_total - layers - lm_head  # embeddings and the final norm
    per_layer = -(-model.params_per_layer // tp)
    return replace(
        model,
        num_heads=model.num_heads // tp,
        num_kv_heads=model.num_kv_heads // tp,
        intermediate_size=model.intermediate_size // tp,
        params_per_layer=per_layer,
        params_total=replicated + per_layer * model.num_layers + lm_head // tp,
        matmul_params_active=model.matmul_params_active // tp,
        largest_layer_params=-(-model.largest_layer_params // tp),
        layer_linears=tuple(_tp_linear(lin, tp) for lin in model.layer_linears),
    )


ROW_PARALLEL = ("o_proj", "down_proj", "out_proj", "dense", "c_proj", "fc2", "w2", "wo")
"""Projections a tensor-parallel plan splits along their input (row-wise: their output is all-reduced); every other
decoder Linear is split along its output (column-wise), as transformers' tp_plan does for the llama family."""


def _tp_linear(linear: tuple[str, int, int, int], tp: int) -> tuple[str, int, int, int]:
    name, a, b, count = linear
    if name.rsplit(".", 1)[-1] in ROW_PARALLEL:
        return name, max(1, a // tp), b, count
    return name, a, max(1, b // tp), count


def _ring(n: int) -> float:
    return (n - 1) / n if n > 1 else 0.0


def _forward_passes(workload: Workload) -> int:
    return 2 if workload.grad_checkpointing else 1


def tp_bus_bytes(model: ModelSpec, workload: Workload, layout: Layout) -> float:
    """Bytes each GPU sends per optimizer step for tensor parallelism (all-reduce bus bytes, nccl-tests)."""
    if layout.tp == 1:
        return 0.0
    tokens = workload.seq_len * workload.micro_batch / layout.cp  # this rank's share of the sequence
    act = ACT_BYTES * tokens * model.hidden_size
    per_layer = (2 * _forward_passes(workload) + 2) * act * 2 * _ring(layout.tp)
    # lm_head (colwise_gather_output): the logits all-gathered once, its input gradient all-reduced once
    head = ACT_BYTES * tokens * model.vocab_size * _ring(layout.tp) + act * 2 * _ring(layout.tp)
    return workload.grad_accum * (model.num_layers * per_layer + head)


def cp_gathered_kv_bytes(model: ModelSpec, workload: Workload, layout: Layout) -> float:
    """Keys and values of one layer over the whole sequence on one rank (this TP rank's heads), bf16."""
    kv = model.num_kv_heads // layout.tp * model.head_dim
    return 2.0 * ACT_BYTES * workload.seq_len * workload.micro_batch * kv


def cp_bus_bytes(model: ModelSpec, workload: Workload, layout: Layout) -> float:
    """Bytes each GPU sends per optimizer step for context parallelism: per layer, one K/V all-gather per forward
    pass, and in backward another plus the reduce-scatter of their gradients."""
    if layout.cp == 1:
        return 0.0
    passes = _forward_passes(workload) + 2
    per_layer = passes * cp_gathered_kv_bytes(model, workload, layout) * _ring(layout.cp)
    return workload.grad_accum * model.num_layers * per_layer


def cp_buffer_bytes(model: ModelSpec, workload: Workload, layout: Layout) -> float:
    """Exchange buffers alive at the backward peak: one layer's gathered K/V and their fp32 gradient accumulators."""
    if layout.cp == 1:
        return 0.0
    gathered = cp_gathered_kv_bytes(model, workload, layout)
    return gathered * (1 + CP_GRAD_BYTES / ACT_BYTES)


def ulysses_bus_bytes(model: ModelSpec, workload: Workload, sp: int) -> float:
    """DeepSpeed-Ulysses: bytes each GPU sends per optimizer step (all-to-all: (sp-1)/sp of what it holds).

    Per layer and forward pass q, k and v go in (heads scattered, sequence gathered) and the output comes back;
    backward moves their gradients the same way."""
    if sp == 1:
        return 0.0
    tokens = workload.seq_len * workload.micro_batch / sp
    q, kv = model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    per_pass = ACT_BYTES * tokens * (2 * q + 2 * kv) * _ring(sp)
    return workload.grad_accum * model.num_layers * per_pass * (_forward_passes(workload) + 1)


def _attention_share_s(model: ModelSpec, workload: Workload, local: Workload, table: ComputeTable) -> float:
    """Attention seconds the chunked estimate leaves out: each rank's s/cp queries attend over the whole sequence.
    Priced at the rate table's attention rates for the whole sequence's length (estimate.compute_time)."""
    tokens = local.seq_len * local.micro_batch * local.grad_accum
    # attention_flops_per_token counts forward (1/3) and backward (2/3); the table's rates are on the forward's FLOPs
    forward = (attention_flops_per_token(model, workload) - attention_flops_per_token(model, local)) / 3
    path, _ = priced_path(table, model, local)
    doc = documents(workload) if path == "flex" else workload.seq_len
    f_rate, b_rate = attention_tflops(
        table, path, workload.seq_len, model.num_heads, model.num_kv_heads, doc, model.head_dim
    )
    return tokens * forward * (_forward_passes(workload) / (f_rate * 1e12) + 1 / (b_rate * 1e12))


def fsdp_placement(placement: Placement, layout: Layout) -> Placement:
    """The placement FSDP2 sees: one rank of each TP group, dp_shard x cp of them, on the FSDP group's wire."""
    return replace(
        placement,
        num_gpus_per_machine=max(1, placement.num_gpus_per_machine // layout.tp),
        busbw_gbps=layout.fsdp_busbw_gbps,
        shard_size=None,
        shard_busbw_gbps=None,
    )


def estimate_layout(
    model: ModelSpec, workload: Workload, placement: Placement, layout: Layout, headroom: float = 0.10
) -> Estimate:
    """FSDP2 under `layout` (strategy "fsdp" with TP/CP groups): per-GPU memory, traffic and time, all predicted."""
    shard = tp_shard_model(model, layout.tp)
    local = replace(workload, seq_len=workload.seq_len // layout.cp)
    base = estimate(shard, local, fsdp_placement(placement, layout), "fsdp", headroom)
    buffers = cp_buffer_bytes(shard, workload, layout) / 1e9
    breakdown = {**base.breakdown, **({"cp_kv_buffers": buffers} if buffers else {})}
    peak, reserved = base.peak_gb + buffers, base.reserved_gb + buffers
    tp_b, cp_b = tp_bus_bytes(model, workload, layout), cp_bus_bytes(shard, workload, layout)
    tp_s = collective_seconds(tp_b, layout.tp_busbw_gbps, gather_scatter=False)
    cp_s = collective_seconds(cp_b, layout.cp_busbw_gbps, gather_scatter=True)
    rates = gpu_rates(placement.gpu_name)
    peak_flops = rates.dense_bf16_tflops * 1e12
    table = table_for(placement.gpu_name, placement.compute)
    attention_s = _attention_share_s(shard, workload, local, table) if layout.cp > 1 else 0.0
    step = base.step_s + tp_s + cp_s + attention_s
    tokens = workload.seq_len * workload.micro_batch * workload.grad_accum / (layout.tp * layout.cp)
    tps = tokens / step if step > 0 else 0.0
    notes = (
        f"{layout.label}: tensor/context-parallel terms predicted, not measured",
        f"TP {tp_s:.2f} s + CP {cp_s:.2f} s of collectives per step, not overlapped",
        *base.notes,
    )
    return replace(
        base,
        fits=reserved <= base.capacity_gb,
        peak_gb=peak,
        reserved_gb=reserved,
        breakdown=breakdown,
        comm_gb_per_step=base.comm_gb_per_step + (tp_b + cp_b) / 1e9,
        comm_s=base.comm_s + tp_s + cp_s,
        compute_s=base.compute_s + attention_s,
        step_s=step,
        tokens_per_s_per_gpu=tps,
        mfu=tps * model_flops_per_token(model, workload) / peak_flops,
        notes=notes,
    )
