"""Tensor and context parallel launches (accelerate `parallelism_config` with tp_size or cp_size > 1).

The sizes come from the launcher's environment (accelerate utils/launch.py exports PARALLELISM_CONFIG_TP_SIZE and
_CP_SIZE). What changes against data parallelism, and why:
- accelerate's data loader hands every rank of one TP x CP group the same micro-batch (data_loader.py: process_index
  // (tp x cp)), so only world / (tp x cp) ranks split the global batch, and a token count summed over all ranks
  counts each token tp x cp times;
- FSDP2 averages gradients over dp_replicate x dp_shard x cp ranks (its `dp_shard_cp` mesh), not over the TP ranks,
  which hold slices of one model and compute the same loss: the loss is scaled by world / tp to turn that average
  back into the sum of token losses;
- TP: transformers shards the weights at load (`from_pretrained(tp_plan="auto", device_mesh=mesh["tp"])`), so the
  weights must come from a checkpoint (a random init is refused);
- CP: torch's context_parallel splits input_ids, labels and position_ids along the sequence in place, so the labels
  are shifted before the split (`shift_labels`, which transformers' loss then uses unshifted); accelerate drops the
  attention mask and forces causal attention (SDPA only; its hook refuses sliding-window models).
DeepSpeed's sequence parallel (sp_size) is not run here.
"""

from __future__ import annotations

import contextlib
import os

from generator.errors import UserError


def model_parallel_sizes(env: dict[str, str] | None = None) -> dict[str, int]:
    """tp, cp and sp sizes of this launch (1 each when the config has no parallelism_config)."""
    env = os.environ if env is None else env
    if env.get("ACCELERATE_USE_PARALLELISM_CONFIG", "").lower() != "true":
        return {"tp": 1, "cp": 1, "sp": 1}
    return {k: int(env.get(f"PARALLELISM_CONFIG_{k.upper()}_SIZE", "1") or 1) for k in ("tp", "cp", "sp")}


def unsupported_reason(args=None, env: dict[str, str] | None = None) -> str | None:
    """Why train.py cannot run this launch's layout with these flags (None when it can)."""
    s = model_parallel_sizes(env)
    if s["sp"] > 1:
        return f"the config asks for sp_size {s['sp']} (DeepSpeed sequence parallel), which train.py does not run"
    if args is None or (s["tp"] == 1 and s["cp"] == 1):
        return None
    if args.method == "qlora":
        return "QLoRA's 4-bit base does not shard under tensor/context parallel; use --method lora"
    if args.liger:
        return "--liger is not checked on tensor/context-parallel shards; drop it"
    if s["cp"] > 1 and args.attn_implementation != "sdpa":
        return "context parallel runs SDPA only; use --attn-implementation sdpa"
    if s["tp"] > 1 and args.init == "random":
        return "tensor parallel shards the weights as from_pretrained loads them; use a checkpoint (--init pretrained)"
    return None


def shared_batch_ranks(env: dict[str, str] | None = None) -> int:
    """Ranks that hold the same micro-batch (one TP x CP group)."""
    s = model_parallel_sizes(env)
    return s["tp"] * s["cp"]


def data_parallel_world(world: int, env: dict[str, str] | None = None) -> int:
    """Ranks that split the global batch."""
    return max(1, world // shared_batch_ranks(env))


def gradient_ranks(world: int, env: dict[str, str] | None = None) -> int:
    """Ranks FSDP averages each gradient over (all but the TP dimension)."""
    return max(1, world // model_parallel_sizes(env)["tp"])


def tp_load_kwargs(accelerator) -> dict:
    """from_pretrained's tensor-parallel arguments: transformers' plan on accelerate's TP mesh (empty without TP)."""
    if model_parallel_sizes()["tp"] == 1:
        return {}
    mesh = accelerator.torch_device_mesh
    if mesh is None or "tp" not in mesh.mesh_dim_names:
        raise UserError("the config asks for tensor parallel but accelerate built no TP mesh")
    return {"tp_plan": "auto", "device_mesh": mesh["tp"]}


def with_shift_labels(inputs: dict) -> dict:
    """Under CP: labels shifted before the sequence is split (the last position predicts nothing), no mask."""
    if model_parallel_sizes()["cp"] == 1:
        return inputs
    import torch

    labels = inputs["labels"]
    shifted = torch.full_like(labels, -100)
    shifted[:, :-1] = labels[:, 1:]
    out = {k: v for k, v in inputs.items() if k != "attention_mask"}
    out["shift_labels"] = shifted
    return out


def cp_context(accelerator, inputs: dict):
    """accelerate's context-parallel context over this micro-batch's sequence tensors (a no-op without CP)."""
    if model_parallel_sizes()["cp"] == 1:
        return contextlib.nullcontext()
    names = [k for k in ("input_ids", "labels", "shift_labels", "position_ids") if k in inputs]
    buffers = [inputs[k] for k in names]
    return accelerator.maybe_context_parallel(
        buffers=buffers, buffer_seq_dims=[1] * len(buffers), no_restore_buffers=set(buffers)
    )


def describe(world: int) -> str | None:
    """One line for the start message (None without TP/CP)."""
    s = model_parallel_sizes()
    if s["tp"] == 1 and s["cp"] == 1:
        return None
    return (
        f"tensor parallel {s['tp']} x context parallel {s['cp']}: {data_parallel_world(world)} data-parallel "
        f"group(s) of {shared_batch_ranks()} ranks sharing each sequence"
    )


def predicted_peak_gb(accelerator, spec, workload) -> tuple[float | None, str]:
    """The estimator's peak for this TP/CP layout (generator.estimate.parallel), printed beside the measured one."""
    import torch

    if not torch.cuda.is_available():
        return None, "no GPU"
    if spec is None:
        return None, workload  # the reason estimator_inputs gave

    from generator.estimate.parallel import Layout, estimate_layout
    from generator.estimate.types import Placement

    s, env = model_parallel_sizes(), os.environ
    local = int(env.get("LOCAL_WORLD_SIZE", accelerator.num_processes))
    props = torch.cuda.get_device_properties(0)
    machines = max(1, accelerator.num_processes // local)
    layout = Layout(
        tp=s["tp"],
        cp=s["cp"],
        dp_shard=int(env.get("PARALLELISM_CONFIG_DP_SHARD_SIZE", "1") or 1),
        dp_replicate=int(env.get("PARALLELISM_CONFIG_DP_REPLICATE_SIZE", "1") or 1),
        tp_busbw_gbps=100.0,  # only the memory prediction is used here; bandwidth does not change it
        cp_busbw_gbps=100.0,
        fsdp_busbw_gbps=100.0,
    )
    placement = Placement(local, props.name, props.total_memory / 1e9, 100.0, machines, 25.0 if machines > 1 else None)
    try:
        est = estimate_layout(spec, workload, placement, layout)
    except Exception as exc:  # a prediction is a nicety: never stop a run for it
        return None, f"estimator failed ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
    return float(est.peak_gb), f"estimator ({layout.label}, predicted)"
