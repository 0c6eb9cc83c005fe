"""The Accelerate config (`accelerate launch --config_file`) for a Plan, as a plain dict.

Checked against accelerate 1.15 (`commands/launch.py`, `utils/launch.py`, `utils/dataclasses.py`):
- `gpu_ids` must be a string (an int or list crashes launch on `.split`); it becomes CUDA_VISIBLE_DEVICES for every
  launcher, and its order is the local rank order.
- FSDP launch defaults are FSDP1 and NO_WRAP, so `fsdp_version` and the wrap policy are always written.
- HSDP goes through `parallelism_config` with `parallelism_config_`-prefixed keys (unprefixed ones are ignored).
- `rdzv_backend`, `same_network` and `enable_cpu_affinity` in a YAML are ignored by launch: they go on the command.
- Multi-machine DeepSpeed uses the `standard` launcher (torchrun on each machine), not pdsh, which needs ssh + hostfile.
"""

from __future__ import annotations

import yaml

from generator.catalog import strategies as catalog
from generator.emit.parallelism import parallelism_block
from generator.plan.types import Plan


def distributed_type(plan: Plan) -> str:
    return catalog.accelerate_type(catalog.strategy(plan.strategy), plan.num_processes)


def accelerate_dict(plan: Plan, ds_json: str | None = None) -> dict:
    """The config dict; `ds_json` is the DeepSpeed JSON path when one is written (then the YAML defers to it)."""
    dist = distributed_type(plan)
    cfg: dict = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": dist,
        "num_machines": plan.num_machines,
        "machine_rank": plan.machine_rank,
        "num_processes": plan.num_processes,
        "gpu_ids": ",".join(str(i) for i in plan.gpu_ids),
        "use_cpu": False,
        "debug": False,
    }
    if not ds_json:  # with a DS JSON, precision is its "bf16" block (accelerate rejects both)
        cfg["mixed_precision"] = plan.workload.mixed_precision
    if dist != "NO":
        cfg["main_process_port"] = plan.main_process_port
    if plan.num_machines > 1:
        cfg["main_process_ip"] = plan.main_process_ip
    if dist == "FSDP":
        cfg["fsdp_config"] = _fsdp(plan)
    if catalog.strategy(plan.strategy).hybrid:
        cfg["parallelism_config"] = {
            "parallelism_config_dp_replicate_size": plan.hsdp_replicate,
            "parallelism_config_dp_shard_size": plan.hsdp_shard,
            "parallelism_config_tp_size": 1,
            "parallelism_config_cp_size": 1,
        }
    elif plan.parallel is not None:  # tensor / context parallel over FSDP2 (generator.emit.parallelism)
        cfg["parallelism_config"] = parallelism_block(plan)
    if dist == "DEEPSPEED":
        cfg["deepspeed_config"] = _deepspeed(plan, ds_json)
    _check_counts(cfg)
    return cfg


def _fsdp(plan: Plan) -> dict:
    fsdp = {
        "fsdp_version": 2,
        "fsdp_reshard_after_forward": catalog.strategy(plan.strategy).reshard_after_forward,
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        "fsdp_offload_params": False,
        # rank 0 reads the weights, the others start on the meta device; needs Accelerator() before from_pretrained.
        # Off under fp8: accelerate 1.15 refuses its torchao backend with it (train.py --precision fp8 says so too).
        # Off under TP too: transformers' tp_plan loading shards the weights on every rank itself.
        "fsdp_cpu_ram_efficient_loading": plan.workload.precision != "fp8"
        and not (plan.parallel and plan.parallel.layout.tp > 1),
        # FSDP checkpoints each decoder layer itself; train.py then leaves HF gradient checkpointing off
        "fsdp_activation_checkpointing": plan.workload.grad_checkpointing,
    }
    if plan.model.decoder_layer_cls:  # else accelerate wraps the model's `_no_split_modules`
        fsdp["fsdp_transformer_layer_cls_to_wrap"] = plan.model.decoder_layer_cls
    return fsdp


def _deepspeed(plan: Plan, ds_json: str | None) -> dict:
    s = catalog.strategy(plan.strategy)
    stage = s.zero_stage
    ds: dict = {"zero3_init_flag": stage == 3}
    if plan.num_machines > 1:
        ds["deepspeed_multinode_launcher"] = "standard"
    if ds_json:
        ds["deepspeed_config_file"] = ds_json
        return ds
    ds.update(
        zero_stage=stage,
        offload_optimizer_device="cpu" if s.offload != "none" else "none",
        offload_param_device="cpu" if s.offloads_params else "none",
        gradient_accumulation_steps=plan.workload.grad_accum,
        gradient_clipping=1.0,
    )
    if stage == 3:
        ds["zero3_save_16bit_model"] = True
    return ds


def _check_counts(cfg: dict) -> None:
    """accelerate never compares gpu_ids with num_processes; a mismatch shares GPUs between ranks and hangs NCCL."""
    ids = cfg["gpu_ids"].split(",")
    if cfg["num_processes"] != len(ids) * cfg["num_machines"]:
        raise ValueError(f"num_processes {cfg['num_processes']} != {len(ids)} gpu_ids x {cfg['num_machines']} machines")


def dump_yaml(cfg: dict) -> str:
    """safe_dump quotes YAML-1.1 booleans ('NO', 'no') and numeric-looking strings ('0'); sorted for stable output."""
    return yaml.safe_dump(cfg, sort_keys=True, default_flow_style=False, width=4096)
