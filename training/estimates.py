"""What the generator's estimator says about this run: FLOPs per token (for MFU), the GPU's peak, the predicted peak
memory printed beside the measured one, and the size of a checkpoint (for the free-space check).

Training never depends on the estimator: when it cannot size the model, these report None and the reason.
"""

from __future__ import annotations

import os

from training.errors import first_line

# train.py builds DDP with gradient_as_bucket_view=True: gradients live inside the all-reduce buckets, saving one
# gradient-sized copy. The memory estimator counts them that way.
DDP_GRADIENT_AS_BUCKET_VIEW = True


def estimator_inputs(args, config, ga: int, grad_ckpt: bool, mixed_precision: str, doc_tokens: int | None = None):
    """(ModelSpec, Workload) for the generator's estimator, built from the config already loaded (no second fetch);
    (None, reason) when the estimator cannot size this model. doc_tokens: the dataset's mean tokens per example,
    which sets how much attention work flex_attention skips."""
    try:
        from generator.estimate.scripts import parse_lora_targets
        from generator.estimate.types import Workload
        from generator.model import spec_from_config

        spec = spec_from_config(config.to_dict(), args.model)
        workload = Workload(
            method=args.method,
            seq_len=args.seq_len,
            micro_batch=args.micro_batch,
            grad_accum=ga,
            grad_checkpointing=grad_ckpt,
            load_dtype=args.load_dtype,
            # fp8 autocasts the rest of the model in bf16; float8's own terms belong to the generator's estimator
            mixed_precision="bf16" if mixed_precision in ("bf16", "fp8") else "no",
            lora_r=args.lora_r,
            lora_targets=parse_lora_targets(args.lora_targets),
            liger=args.liger,
            grad_as_bucket_view=DDP_GRADIENT_AS_BUCKET_VIEW,
            attention="flex" if args.attn_implementation == "flex_attention" else "sdpa",
            doc_tokens=doc_tokens,
        )
        return spec, workload
    except Exception as exc:
        return None, f"estimator cannot size the model ({first_line(exc)})"


def flops_per_token(spec, seq_len: int) -> float | None:
    """The estimator's 6N + 12*L*h*s; None when it could not size the model (MFU is then reported as None)."""
    if spec is None:
        return None
    from generator.model import flops_per_token as model_flops

    return float(model_flops(spec, seq_len))


def checkpoint_bytes(spec, workload, strategy: str, n_params: int, n_trainable: int, load_dtype: str) -> int:
    """What one save_state writes: the estimator's checkpoint_size_gb, else weights + fp32 AdamW m, v (+ masters)."""
    if spec is not None:
        try:
            from generator.estimate import checkpoint_size_gb

            return int(checkpoint_size_gb(spec, workload, strategy) * 1e9)
        except Exception:
            pass
    return n_params * (2 if load_dtype == "bf16" else 4) + n_trainable * 12


def disk_needed(spec, workload, strategy: str, n_params: int, n_trainable: int, args) -> int:
    """Bytes the output directory must have free: one more checkpoint (a preemption writes one even without
    --save-every) plus the export, with 5% to spare."""
    ckpt = checkpoint_bytes(spec, workload, strategy, n_params, n_trainable, args.load_dtype)
    bytes_per = 2 if args.load_dtype == "bf16" else 4
    export = (n_trainable if args.method != "full" else n_params) * bytes_per if args.export else 0
    return int(1.05 * (ckpt + export))


def gpu_peak_tflops() -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    try:
        from generator.estimate import gpu_peak_tflops as peak

        return float(peak(torch.cuda.get_device_name()))
    except Exception:
        return None


def predicted_peak_gb(accelerator, spec, workload, strategy: str) -> tuple[float | None, str]:
    import torch

    if not torch.cuda.is_available():
        return None, "no GPU"
    if spec is None:
        return None, workload  # the reason estimator_inputs gave
    try:
        from generator.estimate import estimate
        from generator.estimate.types import Placement

        local = int(os.environ.get("LOCAL_WORLD_SIZE", accelerator.num_processes))
        props = torch.cuda.get_device_properties(0)
        machines = max(1, accelerator.num_processes // local)
        placement = Placement(
            num_gpus_per_machine=local,
            gpu_name=props.name,
            gpu_memory_gb=props.total_memory / 1e9,
            busbw_gbps=100.0,  # only the memory prediction is used here; bandwidth does not change it
            num_machines=machines,
            inter_node_gbps=25.0 if machines > 1 else None,
        )
        return float(estimate(spec, workload, placement, strategy).peak_gb), "estimator"
    except Exception as exc:
        return None, f"estimator failed ({first_line(exc)})"
