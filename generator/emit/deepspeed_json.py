"""The DeepSpeed JSON written beside the YAML when a setting can only live there (checked in accelerate 1.15).

Accelerate's YAML `deepspeed_config` silently ignores keys it does not know, ZeRO++ `zero_hpz_partition_size` among
them, so hierarchical partitioning needs `deepspeed_config_file`. Then the YAML must not also carry zero_stage, offload
devices, gradient_accumulation_steps, gradient_clipping, zero3_save_16bit_model or top-level mixed_precision
(`DeepSpeedPlugin._deepspeed_config_checks` raises at `Accelerator()`): those move here. Batch and bucket sizes are
"auto": Accelerate fills them at `prepare` (from the dataloader and hidden_size); DeepSpeed drops any "auto" left.
"""

from __future__ import annotations

import json
from pathlib import Path

from generator.catalog import strategies as catalog
from generator.plan.types import Plan


def hpz_partition_size(plan: Plan) -> int | None:
    """ZeRO++ secondary partition size for a ZeRO-3 job that spans NVLink islands or machines, else None.

    The planner marks islands through `hsdp_shard` (GPUs per fast group); across machines without that the group is
    one machine. Not used with parameter offload: the secondary copy would sit on the GPU the offload tries to free.
    """
    s = catalog.strategy(plan.strategy)
    if s.zero_stage != 3 or s.offload != "none":
        return None
    if 1 < plan.hsdp_shard < plan.num_processes and plan.num_processes % plan.hsdp_shard == 0:
        return plan.hsdp_shard
    if plan.num_machines > 1 and len(plan.gpu_ids) > 1:
        return len(plan.gpu_ids)
    return None


def ds_json_path(config_path: str) -> str:
    """`dir/name.yaml` -> `dir/name.ds.json`, kept relative when the YAML path is (configs must not embed $PWD)."""
    p = Path(config_path)
    return str(p.with_name(p.stem + ".ds.json"))


def deepspeed_dict(plan: Plan, hpz: int, comment: list[str]) -> dict:
    """The DeepSpeed config for ZeRO-3 with hierarchical partitioning. `_comment` is a top-level key: DeepSpeed 0.19
    ignores unknown top-level keys (only its sub-configs forbid extras) and Accelerate only fills "auto" values."""
    return {
        "_comment": comment,
        "bf16": {"enabled": plan.workload.mixed_precision == "bf16"},
        # explicit, as in the YAML-only variants: DeepSpeed's value wins over Accelerator(gradient_accumulation_steps)
        "gradient_accumulation_steps": plan.workload.grad_accum,
        # train.py fills it from --max-grad-norm (default 1.0); Accelerate's prepare fills 1.0 for other scripts
        "gradient_clipping": "auto",
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "zero_optimization": {
            "stage": 3,
            "overlap_comm": True,
            "contiguous_gradients": True,
            "reduce_bucket_size": "auto",
            "stage3_prefetch_bucket_size": "auto",
            "stage3_param_persistence_threshold": "auto",
            "stage3_gather_16bit_weights_on_model_save": True,
            "zero_hpz_partition_size": hpz,
        },
    }


def dump_json(data: dict) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"
