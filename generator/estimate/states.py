"""Model states per GPU (weights, gradients, optimizer states, framework buffers), per framework and training phase.

What each framework really keeps (Accelerate 1.15, torch FSDP2, DeepSpeed 0.19; see memory-and-bandwidth.md):
- DDP: parameters keep their load dtype (Accelerate's bf16 only adds autocast), grads and AdamW m/v in that dtype.
  On several GPUs the Reducer's buckets live for the whole run: with gradient_as_bucket_view they are the gradients
  (so zero_grad(set_to_none) frees nothing and the gradients are alive in forward too: 2x H200, fp32 load, measured
  134.4 GB from the second step on against 117.0 on one GPU, where autograd frees them between steps); without it
  the buckets are a second gradient copy. One GPU: no DDP wrapper, no bucket.
- DeepSpeed: module cast to bf16, fp32 master weights + fp32 Adam always. ZeRO-1 4 + 12/N, ZeRO-2 2 + 14/N,
  ZeRO-3 16/N bytes/param (ZeRO paper, Rajbhandari et al. 2020, fig. 1), plus buckets and, in the step, the fp32
  copy of this rank's gradient partition. The YAML path leaves bucket sizes at DeepSpeed's defaults (5e8 elements).
- FSDP2: Accelerate upcasts trainable shards to fp32 under mixed precision: 16/N, plus bf16 unsharded units in flight.
- LoRA: frozen base, adapters upcast to fp32 by peft (autocast_adapter_dtype) with fp32 AdamW: 16 bytes/adapter param.
- QLoRA: NF4 base (0.5 byte/param + double-quantised block constants); peft's prepare_model_for_kbit_training casts
  every other parameter (embeddings, lm_head, norms) to fp32.
Phases: "forward_end" (the loss and its gradient buffers), "backward_start" (the last decoder layer's backward, all
activations still held), "backward_end" (the first decoder layer's backward, nearly all gradients held), "optimizer"
(the step). Bytes in, GB out happens in core.
"""

from __future__ import annotations

from generator.catalog import strategies as catalog
from generator.estimate.lora_targets import lora_params
from generator.estimate.scripts import script_facts
from generator.estimate.types import Placement, Workload
from generator.model.types import ModelSpec

PHASES = ("forward_end", "backward_start", "backward_end", "optimizer")

# DeepSpeed defaults (deepspeed/runtime/zero/config.py) that stand when Accelerate builds the config from the YAML.
DS_REDUCE_BUCKET_ELEMS = 5e8
DS_PREFETCH_BUCKET_ELEMS = 5e7
DS_MAX_LIVE_PARAMS = 1e9
DS_SUB_GROUP_ELEMS = 1e9  # sub_group_size: ZeRO-3 optimizer steps this many elements at a time
# bitsandbytes NF4 with double quantisation: 8-bit absmax per 64 weights + fp32 per 256 blocks = 0.127 bit/param.
NF4_BYTES_PER_PARAM = 0.5 + 0.127 / 8
# bitsandbytes 8-bit AdamW: one byte each for m and v (block-wise quantisation constants are negligible).
ADAMW8BIT_STATE_BYTES = 2.0
# peft keeps LoRA adapters in fp32 (autocast_adapter_dtype=True): weight 4 + grad 4 + AdamW 8.
LORA_STATE_BYTES = 16.0

_IN_STEP = ("forward_end", "backward_start", "backward_end")  # phases of forward/backward, not the optimizer step


def shard_count(strategy: str, placement: Placement) -> int:
    """GPUs one model copy's states are spread over (1 for DDP)."""
    s = catalog.strategy(strategy)
    if s.framework == "ddp":
        return 1
    if s.hybrid:
        return placement.shard_size or placement.num_gpus_per_machine
    return placement.num_gpus


def trainable_params(model: ModelSpec, workload: Workload) -> int:
    if workload.method == "full":
        return model.params_total
    return lora_params(model, workload.lora_r, workload.lora_targets)


def load_bytes(workload: Workload) -> int:
    return 4 if workload.load_dtype == "fp32" else 2


def _optimizer_bytes(workload: Workload, param_bytes: float) -> float:
    return ADAMW8BIT_STATE_BYTES if workload.optimizer == "adamw8bit" else 2 * param_bytes


def foreach_temporary_bytes(workload: Workload, params: float, param_bytes: float) -> float:
    """Extra bytes torch AdamW's foreach step allocates (custom script): `exp_avg_sq_sqrt = _foreach_sqrt(v)`, one
    full-size copy of the second moment in the parameters' dtype, alive until `_foreach_addcdiv_` (torch/optim/adam.py
    704-727, docs/scripts.md). Trainable parameters share one group, so the copy spans all of them on this GPU.
    Fused AdamW and DeepSpeed's optimizers update in place; bitsandbytes' 8-bit AdamW is not torch's foreach."""
    if script_facts(workload.script).adamw != "foreach" or workload.optimizer != "adamw":
        return 0.0
    return params * param_bytes


def qlora_unquantised_params(model: ModelSpec) -> int:
    """Parameters bitsandbytes leaves out of 4-bit under QLoRA: the embeddings and an untied lm_head."""
    return model.params_embedding + (0 if model.tie_embeddings else model.vocab_size * model.hidden_size)


def qlora_kept_bytes(workload: Workload) -> int:
    """Bytes per parameter QLoRA's unquantised parameters (embeddings, norms, lm_head) are held in: 4 where the
    script calls peft's prepare_model_for_kbit_training (ScriptFacts.kbit_upcast) or loads in fp32, else the load
    dtype's 2 (TRL 1.16 with --dtype bfloat16: measured 8.5 GB at 8,192 tokens against 11.9 predicted with fp32,
    bench/results/h200-x1-trl-cli-2026-12-02-b.json)."""
    return 4 if script_facts(workload.script).kbit_upcast or workload.load_dtype == "fp32" else 2


def _frozen_base_bytes(model: ModelSpec, workload: Workload, strategy: str) -> float:
    """LoRA/QLoRA frozen base weights on one GPU (before sharding)."""
    p = model.params_total
    if workload.method == "qlora":
        kept = qlora_unquantised_params(model)
        return (p - kept) * NF4_BYTES_PER_PARAM + qlora_kept_bytes(workload) * kept
    return p * (2 if catalog.strategy(strategy).framework == "deepspeed" else load_bytes(workload))


def _fsdp_in_flight(model: ModelSpec, reshard: bool) -> dict[str, float]:
    """bf16 unsharded bytes alive per phase under FSDP2 with one unit per decoder layer.

    The root unit (embeddings, final norm, lm_head) is not resharded after forward and its gradients are reduced last.
    In backward one layer's params, its prefetched neighbour and the layer's unsharded grads are alive too. Without
    reshard after forward every layer's params stay gathered until that layer's backward."""
    root = _root_params(model)
    layer = model.params_per_layer
    lm_head = 0 if model.tie_embeddings else model.vocab_size * model.hidden_size
    held = 2.0 * model.params_total if not reshard else 2.0 * root
    return {
        "forward_end": held,
        "backward_start": held + 2.0 * (layer if not reshard else 3 * layer),
        # first layer: its params and grads, the root's params and lm_head's grad (reduced with the root, last)
        "backward_end": 2.0 * (root + lm_head + 2 * layer),
    }


def _root_params(model: ModelSpec) -> int:
    """Parameters outside the decoder layers: embeddings, final norm, lm_head (FSDP's root unit)."""
    return model.params_total - model.num_layers * model.params_per_layer


def ds_live_params_bytes(model: ModelSpec) -> float:
    """ZeRO-3 gathered bf16 params in forward/backward: up to stage3_max_live_parameters plus the prefetch bucket
    (2x H200 measurement: ~2.3 GB beyond states and activations after forward for Mistral-7B)."""
    return 2.0 * (min(DS_MAX_LIVE_PARAMS, model.params_total) + DS_PREFETCH_BUCKET_ELEMS)


def model_states(model: ModelSpec, workload: Workload, placement: Placement, strategy: str) -> dict[str, dict]:
    """Named byte terms alive in each phase: {phase: {term: bytes}} (terms absent from a phase are not alive)."""
    s = catalog.strategy(strategy)
    n = shard_count(strategy, placement)
    t = trainable_params(model, workload)
    full = workload.method == "full"
    accum = workload.grad_accum > 1
    terms: dict[str, dict[str, float]] = {ph: {} for ph in PHASES}

    def every(name: str, value: float, phases=PHASES) -> None:
        for ph in phases:
            if value:
                terms[ph][name] = terms[ph].get(name, 0.0) + value

    grad_phases = PHASES if accum else ("backward_end", "optimizer")
    if not full:
        replicated = not s.shards_parameters
        every("frozen_weights", _frozen_base_bytes(model, workload, strategy) / (1 if replicated else n))
    if s.framework == "ddp":
        wb = load_bytes(workload) if full else 4
        every("weights", t * wb)
        # Late in backward (first decoder layer) the embedding's gradient is not allocated yet; the step has it.
        late = t - (model.params_embedding if full and not accum else 0)
        every("optimizer_states", t * (_optimizer_bytes(workload, wb) if full else LORA_STATE_BYTES - 8))
        every("foreach_step_temporaries", foreach_temporary_bytes(workload, t, wb), ("optimizer",))
        if placement.num_gpus > 1 and workload.grad_as_bucket_view:
            every("grads", t * wb)  # the Reducer's buckets, allocated once and never freed
            return terms
        every("grads", t * wb, tuple(ph for ph in grad_phases if ph != "backward_end"))
        every("grads", late * wb, ("backward_end",))
        if placement.num_gpus > 1:
            every("ddp_grad_bucket", t * wb)
        return terms
    opt = _optimizer_bytes(workload, 4.0)
    if s.framework == "fsdp":
        every("master_weights_fp32", 4.0 * t / n)
        # Late in backward the first layer's and the root's shards are not reduced yet; the step has them all.
        # Under accumulation the sharded grads appear only in the last micro-step (the others keep unsharded ones).
        late = t - (_root_params(model) + model.params_per_layer if full else 0)
        every("grads_fp32", 4.0 * t / n, ("optimizer",))
        every("grads_fp32", 4.0 * late / n, ("backward_end",))
        every("optimizer_states", opt * t / n)
        every("foreach_step_temporaries", foreach_temporary_bytes(workload, t / n, 4.0), ("optimizer",))
        for phase, value in _fsdp_in_flight(model, reshard=s.reshard_after_forward).items():
            every("fsdp_unsharded", value, (phase,))
        if accum:  # Accelerate's no_sync on FSDP2 keeps unsharded grads (reduce dtype bf16) across micro-steps
            every("fsdp_accum_grads", 2.0 * t, _IN_STEP)
        return terms
    # DeepSpeed; the terms below reproduce ZeRO-1/2/3 on 2x H200 (tests/test_estimate_gpu.py).
    offload_opt = s.offload != "none"
    stage = s.zero_stage
    if full and not s.offloads_params:
        every("weights_bf16", 2.0 * t / (n if stage == 3 else 1))
    if not offload_opt:
        every("master_weights_fp32", 4.0 * t / n)
        every("optimizer_states", opt * t / n)
    if stage in (1, 2):
        # Backward: stage 1 holds full bf16 grads (reduced after backward), stage 2 its reduced partition; the
        # optimizer's backward() allocates one contiguous-gradient buffer of reduce_bucket_size elements.
        in_backward = tuple(ph for ph in grad_phases if ph != "optimizer")
        if stage == 2 and not accum:
            # Stage 2 allocates a rank's whole gradient partition when the first gradient of it is reduced. The last
            # rank owns the last layers and lm_head, whose gradients come first: its partition is alive beside all
            # activations (2x H200, no checkpointing: rank 1 peaked 94.4 GB, rank 0 and ZeRO-1 89.0 GB).
            in_backward = ("backward_start", *in_backward)
        every("grads_bf16", 0.0 if offload_opt else 2.0 * t / (1 if stage == 1 else n), in_backward)
        every("ds_buckets", 2.0 * DS_REDUCE_BUCKET_ELEMS, ("backward_start", "backward_end"))
        if not offload_opt:
            # step(): the bf16 partition, its flattened copy and that copy cast to fp32 are alive together; this is
            # the measured peak of both stages (87.0 GB on 2 GPUs).
            every("grads_bf16", 2.0 * t / n, ("optimizer",))
            every("step_flat_grads", 2.0 * t / n, ("optimizer",))
            every("fp32_grad_partition", 4.0 * t / n, ("optimizer",))
    else:
        # Stage 3 preallocates the bf16 grad partition and a reduce bucket (both seen right after prepare), gathers
        # up to stage3_max_live_parameters in forward/backward, and steps one fp32 sub_group at a time.
        if not offload_opt:
            every("grads_bf16", 2.0 * t / n)
            every("fp32_grad_partition", 4.0 * min(t / n, DS_SUB_GROUP_ELEMS), ("optimizer",))
        every("ds_buckets", 2.0 * DS_REDUCE_BUCKET_ELEMS)
        every("zero3_live_params", ds_live_params_bytes(model), _IN_STEP)
    return terms


def cpu_bytes_per_machine(model: ModelSpec, workload: Workload, placement: Placement, strategy: str) -> float:
    """Host memory for offloaded states: fp32 master + Adam + fp32 grads (+ bf16 params for ZeRO-3), per machine."""
    s = catalog.strategy(strategy)
    if s.offload == "none":
        return 0.0
    t = trainable_params(model, workload)
    per_param = 4.0 + _optimizer_bytes(workload, 4.0) + 4.0 + (2.0 if s.offloads_params else 0.0)
    return per_param * t / placement.num_machines
