"""HBM bytes a step streams outside its operators, which estimate.timing prices at the table's measured HBM rate: the
optimizer's update and clip_grad_norm_ (the step's tail), autocast's weight casts, the copies around sharded
collectives, peft's adapter passes and QLoRA's dequantisation. Pure; each constant names the rows it was fitted to or
the source it was counted from."""

from __future__ import annotations

from generator.catalog import strategies as catalog
from generator.estimate import operators as ops
from generator.estimate.compute_source import fitted
from generator.estimate.compute_table import ComputeTable
from generator.estimate.compute_time import forward_passes, gemms_s
from generator.estimate.lora_targets import lora_params
from generator.estimate.states import load_bytes, qlora_unquantised_params, shard_count, trainable_params
from generator.estimate.types import Placement, Workload
from generator.model.types import ModelSpec

# FSDP2 / ZeRO-3 memory traffic around each collective, bytes per (unsharded) parameter: an all-gather casts the fp32
# shard to bf16, copies it into the flat buffer and copies the gathered result out to the parameters (~6); a
# reduce-scatter copies the bf16 grads in and casts the reduced shard to fp32 (~4). Derived from FSDP2's
# foreach_all_gather / foreach_reduce design, not measured.
GATHER_COPY_BYTES = 6.0
REDUCE_COPY_BYTES = 4.0
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
# Issue 26: the constants fitted on residuals of the former compute term (here the LoRA adapter bytes, the QLoRA
# dequantisation bytes and the compiled adapter share; in estimate.timing the DeepSpeed and ZeRO-3 overheads) are
# refitted by bench/fit_compute.py on the same rows on top of the operator model; generator/compute/fit.json holds
# each value with its rows and their errors and is what the estimator reads (fitted(key, default)); the values written
# here are the defaults without a fit file (the former fit).
LORA_BYTES_KEY = "lora_bytes_per_token_width"
# Share of those adapter passes that disappear when each decoder layer is compiled (train.py --compile-layers, and
# always under fp8): inductor fuses peft's casts, scaling and add into the neighbouring kernels, but not the adapters'
# GEMM outputs into their adds. Fitted (bench/fit_compute.py, adapter_s) on what train.py's adapters added to one
# compiled decoder layer, bf16 and float8, of Mistral-7B, Phi and StarCoder2 (train.py's default targets and
# all-linear), timed on an H100 with the probe's own code (bench/results/h100-x1-lora-layer-gap-compiled-*-2026-12-07):
# 0.81, each pair's own 0.64-0.87. Fitted before on one compiled Mistral step (1.0, at its bound: there it also hid the
# operators' over-price of the compiled frozen layers: 0-8% on an H200's rows, 9-19% on the H100's while the
# elementwise passes were priced at the copy's rate), which left every LoRA step priced from a model's own layer rows
# 3-15% fast. Checked on the compiled and float8 LoRA steps, which it never saw (REPORT.md).
COMPILED_ADAPTER_FUSED = 0.81
# QLoRA: bitsandbytes dequantises every 4-bit (NF4, double-quantised) weight to bf16 at each use: forward, the
# recompute, and backward (the input gradient needs the weight again). Effective HBM bytes per quantised parameter per
# use; far above the 2.5 bytes it moves (0.5 read + 2 written) because the dequantisation kernel reaches a small
# share of the bandwidth. Fitted to the one QLoRA row (1x H200, seq 4096, ckpt: 0.778 s/step).
QLORA_DEQUANT_BYTES_PER_PARAM = 25.7
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


def update_bytes(model: ModelSpec, workload: Workload, placement: Placement, strategy: str) -> float:
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


def foreach_extra_bytes(model: ModelSpec, workload: Workload, placement: Placement, strategy: str) -> float:
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


def clip_bytes(model: ModelSpec, workload: Workload, placement: Placement, strategy: str) -> float:
    """HBM bytes of clip_grad_norm_ on one GPU: the gradients read for the norm, then read and written by the scale
    (FSDP2 clips each rank's shard of its fp32 gradients; DeepSpeed's own clip is in its fitted overhead)."""
    s = catalog.strategy(strategy)
    if s.offload != "none" or s.framework == "deepspeed":
        return 0.0
    return CLIP_PASSES * _trained_pass_bytes(model, workload, placement, strategy)


def cast_bytes(model: ModelSpec, workload: Workload, strategy: str, fp32_layers_in_row: bool = False) -> float:
    """fp32 weights under autocast (DDP): each forward (and recompute) casts them to bf16 (read 4 + write 2 bytes),
    and backward casts the bf16 weight gradients into the fp32 .grad (read 2 + write 4). A frozen LoRA base is cast
    the same way in every forward but has no weight gradients; a QLoRA base is 4-bit (see dequant_bytes).
    `fp32_layers_in_row`: the decoder layers' own casts ran inside a float8 row timed at fp32 weights
    (layer_rows.fp8_layers_in_row), so only the weights outside them are counted here."""
    if not fp32_under_autocast(workload, strategy):
        return 0.0
    grads = 6.0 if workload.method == "full" else 0.0
    params = model.params_total - (model.num_layers * model.params_per_layer if fp32_layers_in_row else 0)
    return workload.grad_accum * params * (6.0 * forward_passes(workload) + grads)


def fp32_under_autocast(workload: Workload, strategy: str) -> bool:
    """The weights the GEMMs read are fp32 masters autocast casts (DDP with an fp32 load; QLoRA's base is 4-bit)."""
    ddp = catalog.strategy(strategy).framework == "ddp"
    return ddp and workload.load_dtype == "fp32" and workload.method != "qlora"


def tail_bytes(model: ModelSpec, workload: Workload, placement: Placement, strategy: str) -> float:
    """HBM bytes issued after the last backward kernel: clip_grad_norm_ and the optimizer's update. Every measured
    script ends its step in a host read (train.py's and the plain loop's loss.item(), bench/scripts/trl_sft.py's
    synchronised step ends), so in a host-bound step these run after the host has issued everything else, never
    under its issuing: Mistral-7B's full fine-tune at 1,024 x 1 (222 ms a step, h200-x1-families-hostpaired-2026-12-03)
    prices 68 ms here."""
    tail = update_bytes(model, workload, placement, strategy) + clip_bytes(model, workload, placement, strategy)
    return tail + foreach_extra_bytes(model, workload, placement, strategy)


def collective_copy_bytes(model: ModelSpec, workload: Workload, strategy: str) -> float:
    """Copy-in/copy-out and dtype casts around the all-gathers and reduce-scatters of sharded parameters."""
    s = catalog.strategy(strategy)
    gathers = s.gathers_per_micro_step
    if not gathers:
        return 0.0
    # FSDP reduce-scatters once per optimizer step (Accelerate's no_sync), ZeRO-3 every micro-step
    reduces = 1 if s.framework == "fsdp" else workload.grad_accum
    return model.params_total * (gathers * workload.grad_accum * GATHER_COPY_BYTES + reduces * REDUCE_COPY_BYTES)


def adapter_bytes(model: ModelSpec, workload: Workload) -> float:
    """peft's memory-bound passes around every adapted linear (LoRA and QLoRA)."""
    if workload.method == "full":
        return 0.0
    tokens = workload.seq_len * workload.micro_batch * workload.grad_accum
    passes = forward_passes(workload) + LORA_BACKWARD_PASSES
    fused = fitted("compiled_adapter_fused", COMPILED_ADAPTER_FUSED) if workload.layers_compiled else 0.0
    width = lora_params(model, 1, workload.lora_targets)
    return tokens * width * fitted(LORA_BYTES_KEY, LORA_BYTES_PER_TOKEN_WIDTH) * passes * (1 - fused)


def adapter_s(table: ComputeTable, model: ModelSpec, workload: Workload) -> float:
    """Seconds a LoRA step's adapters add to its frozen layers, per optimizer step, as the step prices them: their
    rank-r GEMMs at the table's rates and peft's passes (adapter_bytes) at its HBM rate. bench/fit_compute.py fits
    compiled_adapter_fused on it against compiled layers timed with and without adapters."""
    if workload.method == "full":
        return 0.0
    gemms = workload.grad_accum * gemms_s(table, model, workload, ops.is_adapter)
    return gemms + adapter_bytes(model, workload) / (table.hbm_gbps * 1e9)


def dequant_bytes(model: ModelSpec, workload: Workload, in_row: bool = False) -> float:
    """QLoRA: every use of a 4-bit weight (each forward, backward) dequantises it; embeddings and lm_head stay fp32.
    `in_row`: the decoder layers (every 4-bit weight) are priced whole from a qlora layer row, which holds this."""
    if workload.method != "qlora" or in_row:
        return 0.0
    quantised = model.params_total - qlora_unquantised_params(model)
    uses = forward_passes(workload) + 1
    return (
        workload.grad_accum * quantised * uses * fitted("qlora_dequant_bytes_per_param", QLORA_DEQUANT_BYTES_PER_PARAM)
    )
