"""GPU time of one optimizer step's operators, priced from a ComputeTable (estimate.compute_table): each GEMM at its
own measured rate by shape and dtype, the MoE experts as grouped GEMMs, attention by kernel path, float8 casts per
element, the elementwise chain (estimate.passes) at the measured widening-copy rate. Pure."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, replace

from generator.estimate import operators as ops
from generator.estimate.attention import (
    attention_rows,
    documents,
    keys_per_query,
    layer_groups,
    probe_attention,
)
from generator.estimate.attention_rates import attention_tflops, priced_path
from generator.estimate.compute_source import fitted
from generator.estimate.compute_table import (
    ComputeTable,
    cast_ns,
    gemm_tflops,
    grouped_tflops,
)
from generator.estimate.host_time import host_layer_s, host_scale, host_step_s, model_key
from generator.estimate.layer_rows import anchor, expert_impl
from generator.estimate.lora_targets import adapted_modules
from generator.estimate.passes import elementwise_bytes, pass_bytes
from generator.estimate.scripts import liger_kernels
from generator.estimate.types import Workload
from generator.model.types import ModelSpec

ELEMENTWISE_SCALE = "elementwise_scale"
"""fit.json key: measured elementwise time over the bytes estimate.passes counts at the table's widening-copy rate
(ComputeTable.passes_gbps; 1.31 at its copy rate before 2026-12-07)."""
FP8_CAST_SCALE = "fp8_cast_scale"
"""fit.json key: the float8 casts' time inside train.py's compiled layers over the probe's standalone compiled cast
(inductor fuses the amax and the cast into neighbouring kernels there; the probe times each cast on its own)."""


@dataclass(frozen=True)
class ComputeTime:
    gemm_s: float
    """Dense GEMMs (Linears, lm_head, LoRA's rank-r pair), all micro-steps, recompute included."""
    experts_s: float
    """MoE expert grouped GEMMs."""
    attention_s: float
    """Attention kernels (scores and values), forward + backward + recompute."""
    elementwise_s: float
    """Norms, residual adds, RoPE, SwiGLU, MoE shuffle, loss (estimate.passes) at the measured widening-copy rate."""
    fp8_cast_s: float
    """torchao's float8 amax + cast (+ transpose) passes."""
    host_s: float = 0.0
    """CPU time to issue the step's kernels (the table's host rows: the decoder layers, and once a step what lies
    outside them): the floor under the GPU time."""
    layers_s: float = 0.0
    """Decoder layers priced whole from the table's layer rows (MoE models), attention and LoRA's GEMMs apart; the
    other fields then hold only what lies outside those rows."""

    @property
    def gpu_s(self) -> float:
        return self.gemm_s + self.experts_s + self.attention_s + self.elementwise_s + self.fp8_cast_s + self.layers_s

    @property
    def total_s(self) -> float:
        """GPU time, or the host's where issuing the kernels takes longer (the GPU then waits between them)."""
        return max(self.gpu_s, self.host_s)


def forward_passes(workload: Workload) -> int:
    """Forward passes per micro-step: activation checkpointing reruns the forward inside backward."""
    return 2 if workload.grad_checkpointing else 1


def _gemm_s(table: ComputeTable, model: ModelSpec, workload: Workload, fwd: int, keep=None) -> float:
    total = 0.0
    for g in ops.gemms(model, workload, keep):
        rate = gemm_tflops(table, g.dtype, g.op, g.m, g.k, g.n) * 1e12
        total += g.flops / rate * (fwd if g.passes == "forward" else 1)
    return total


def gemms_s(table: ComputeTable, model: ModelSpec, workload: Workload, keep=None) -> float:
    """One micro-step's dense GEMMs at the table's rates, the forward rerun under checkpointing; `keep(name)` selects
    the Linears (operators.is_decoder_base, operators.is_adapter)."""
    return _gemm_s(table, model, workload, forward_passes(workload), keep)


def fp8_casts_s(table: ComputeTable, model: ModelSpec, workload: Workload) -> float:
    """One micro-step's float8 casts (torchao's, priced as in the step; zero without fp8)."""
    return _fp8_cast_s(table, model, workload, forward_passes(workload))


def _experts_s(table: ComputeTable, model: ModelSpec, workload: Workload, fwd: int, impl: str) -> float:
    tokens = workload.seq_len * workload.micro_batch
    if impl not in table.grouped and impl == "grouped_mm":
        impl = "loop_bf16"
    total = 0.0
    for ex in ops.experts(model, workload):
        rows = tokens * ex.top_k
        flops = 2.0 * rows * ex.k_in * ex.n_out * ex.count
        forward = flops / (grouped_tflops(table, impl, rows, ex.k_in, ex.n_out) * 1e12)
        backward = flops / (grouped_tflops(table, impl, rows, ex.n_out, ex.k_in) * 1e12)
        total += fwd * forward + backward * (2 if ex.trained else 1)
    return total


def _attention_s(table: ComputeTable, model: ModelSpec, workload: Workload, fwd: int) -> float:
    return sum(_layers_attention_s(table, group, workload, fwd) for group in layer_groups(model))


def _layers_attention_s(table: ComputeTable, model: ModelSpec, workload: Workload, fwd: int) -> float:
    """One kind of decoder layer's attention (attention.layer_groups), all model.num_layers of them."""
    path, _ = priced_path(table, model, workload)
    rows, length = attention_rows(workload)  # TRL's padding-free packing flattens the micro-batch into one row
    flops = 4.0 * rows * length * model.num_heads * model.head_dim
    flops *= keys_per_query(model, workload) * model.num_layers
    doc = documents(workload) if path == "flex" else length
    f_rate, b_rate = attention_tflops(table, path, length, model.num_heads, model.num_kv_heads, doc, model.head_dim)
    return flops * (fwd / (f_rate * 1e12) + 1 / (b_rate * 1e12))


def _fp8_cast_s(table: ComputeTable, model: ModelSpec, workload: Workload, fwd: int) -> float:
    """Per element: 'cast' (amax + scale + cast) for the input each forward, the output gradient and the weight
    each forward; 'cast_transpose' for the saved input recast for the weight gradient and the weight's transposed
    copy for the input gradient. Compiled rates: fp8 always compiles the decoder layers."""
    el = ops.fp8_cast_elements(model, workload)
    if not any(el.values()):
        return 0.0
    cast = cast_ns(table, "cast", compiled=True) or 0.0
    trans = cast_ns(table, "cast_transpose", compiled=True) or cast
    return (
        1e-9
        * fitted(FP8_CAST_SCALE, 1.0)
        * (cast * (fwd * el["input"] + el["grad"] + fwd * el["weight"]) + trans * (el["input_t"] + el["weight"]))
    )


def _host_s(table: ComputeTable, model: ModelSpec, workload: Workload, fwd: int) -> float:
    """Host seconds of one optimizer step: each decoder layer's forward (rerun under checkpointing) and backward in
    every micro-step, and the step's work outside the layers once; the model's own layer's rows where the table has
    them (generator/estimate/host_time.py)."""
    args = (table, workload.method, workload.layers_compiled, liger_kernels(workload), model_key(model))
    adapters = sum(n for *_, n in adapted_modules(model, workload.lora_targets)) / model.num_layers
    scale = host_scale(model, workload.method, adapters, workload.lora_dropout > 0)
    f, b = host_layer_s(*args, scale=scale)
    return workload.grad_accum * model.num_layers * (fwd * f + b) + host_step_s(*args)


def _attention_split(table: ComputeTable, model: ModelSpec, workload: Workload) -> tuple[float, float]:
    """(forward, backward) attention seconds of one micro-step, all layers."""
    backward = _attention_s(table, model, workload, 0)
    return _attention_s(table, model, workload, 1) - backward, backward


def _row_rest_s(table: ComputeTable, model: ModelSpec, workload: Workload, fwd: int, row: tuple) -> tuple:
    """(tokens, seconds) of one layer row without its attention, taken out at the row's shape (one causal document
    per sequence, SDPA where the class takes it, as the rows were timed: attention.probe_attention). A checkpointed
    step reads the row's checkpointed time where it was timed, else the forward twice plus the backward: measured on
    one H200 they agree within 1-4% from 8,192 tokens up and differ below (NF4 Mixtral 13% less at 2,048 tokens,
    dense NF4 Mistral 55% more; bench/results/qlora-layers-ckpt-h200-2026-12-03.json,
    compute-mixtral-h200-2026-12-03.json)."""
    mb, seq, f, b, ckpt = row
    kernel = probe_attention(model.attentions)
    probed = replace(workload, seq_len=seq, micro_batch=mb, attention=kernel, doc_tokens=None)
    af, ab = (x / model.num_layers for x in _attention_split(table, model, probed))
    if workload.grad_checkpointing and ckpt is not None:
        return mb * seq, max(ckpt - fwd * af - ab, 0.0)
    return mb * seq, fwd * max(f - af, 0.0) + max(b - ab, 0.0)


def _layers_s(table: ComputeTable, model: ModelSpec, workload: Workload, fwd: int, rows: tuple) -> float:
    """The decoder layers from their measured rows, attention put back at the workload's shape by the attention rows.
    One row scales with the tokens. Two or more are read along the line through the two nearest: a layer whose cost
    does not follow its tokens (a per-expert loop's host synchronisations and per-call dequantisation) has a fixed
    part that proportional scaling would spread over the tokens; a line that falls with the tokens (noise) is not
    trusted, and the nearest row scales instead."""
    points = [_row_rest_s(table, model, workload, fwd, row) for row in rows]
    tokens = workload.seq_len * workload.micro_batch
    nearest = min(points, key=lambda p: abs(p[0] - tokens))
    per_layer = nearest[1] * tokens / nearest[0]
    if len(points) > 1:
        i = min(max(bisect_left([t for t, _ in points], tokens), 1), len(points) - 1)  # the segment holding tokens
        (t0, s0), (t1, s1) = points[i - 1], points[i]
        if s1 > s0 and t1 > t0:
            per_layer = max(s0 + (s1 - s0) * (tokens - t0) / (t1 - t0), 0.0)
    return model.num_layers * per_layer


def _operators_time(table: ComputeTable, model: ModelSpec, workload: Workload, strategy: str) -> ComputeTime:
    """Every operator priced on its own: the dense GEMMs, the experts, attention, casts and the elementwise chain."""
    fwd, n = forward_passes(workload), workload.grad_accum
    return ComputeTime(
        gemm_s=n * _gemm_s(table, model, workload, fwd),
        experts_s=n * _experts_s(table, model, workload, fwd, expert_impl(workload, strategy)),
        attention_s=n * _attention_s(table, model, workload, fwd),
        elementwise_s=n * _elementwise_s(table, elementwise_bytes(model, workload, fwd)),
        fp8_cast_s=n * _fp8_cast_s(table, model, workload, fwd),
        host_s=_host_s(table, model, workload, fwd),
    )


def _row_time(table: ComputeTable, model: ModelSpec, workload: Workload, rows: tuple) -> ComputeTime:
    """The decoder layers from their measured row; lm_head, LoRA's GEMMs, attention and the loss apart."""
    fwd, n = forward_passes(workload), workload.grad_accum
    loss_bytes = workload.seq_len * workload.micro_batch * pass_bytes(model, workload).loss
    return ComputeTime(
        gemm_s=n * _gemm_s(table, model, workload, fwd, lambda name: not ops.is_decoder_base(name)),
        experts_s=0.0,
        attention_s=n * _attention_s(table, model, workload, fwd),
        elementwise_s=n * _elementwise_s(table, loss_bytes),
        fp8_cast_s=0.0,
        host_s=_host_s(table, model, workload, fwd),
        layers_s=n * _layers_s(table, model, workload, fwd, rows),
    )


def _elementwise_s(table: ComputeTable, nbytes: float) -> float:
    """At the widening copy's rate times the fitted scale (ComputeTable.passes_gbps), never faster than the card's
    plain copy: on a card with less bandwidth than the passes reached where they were measured, its HBM binds."""
    return nbytes * max(fitted(ELEMENTWISE_SCALE, 1.0) / table.passes_gbps, 1.0 / table.hbm_gbps) / 1e9


def compute_time(table: ComputeTable, model: ModelSpec, workload: Workload, strategy: str) -> ComputeTime:
    """The step's operator time on one GPU (all grad_accum micro-steps). Where the table times this model's decoder
    layers whole (MoE), the row holds their GEMMs, experts, dispatch and elementwise chain, which the operators alone
    miss (Mixtral-8x7B: predicted 26-35% fast from its operators). The levers the row did not run (Liger's kernels,
    float8 GEMMs and casts, compiled layers where no compiled row was timed) are then priced as the operators'
    difference between the workload and its bf16 twin (anchor), added to the row: Mixtral's Liger row reads +28.9%
    from the operators alone and -4.4% so, its float8 row (on the compiled row) +2.9% (bench/REPORT.md)."""
    twin, row = anchor(table, model, workload, strategy)
    if row is None:
        return _operators_time(table, model, workload, strategy)
    anchored = _row_time(table, model, twin, row)
    if twin == workload:
        return anchored
    ours, theirs = _operators_time(table, model, workload, strategy), _operators_time(table, model, twin, strategy)
    lever_s = ours.gpu_s - theirs.gpu_s
    return replace(anchored, layers_s=max(anchored.layers_s + lever_s, 0.0), host_s=ours.host_s)
