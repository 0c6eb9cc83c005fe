"""Keys the installed accelerate (1.15) reads, per config section. Kept as tables (reading them from accelerate would
import torch); tests/test_check_known_keys.py compares them with accelerate's ClusterConfig and launch parser."""

from __future__ import annotations

TOP_LEVEL = frozenset(
    {
        "compute_environment", "distributed_type", "mixed_precision", "use_cpu", "debug",
        "num_processes", "machine_rank", "num_machines", "gpu_ids", "main_process_ip", "main_process_port",
        "rdzv_backend", "same_network", "main_training_function", "enable_cpu_affinity",
        "fp8_config", "deepspeed_config", "fsdp_config", "parallelism_config", "megatron_lm_config", "mpirun_config",
        "downcast_bf16", "tpu_name", "tpu_zone", "tpu_use_cluster", "tpu_use_sudo", "command_file", "commands",
        "tpu_vm", "tpu_env", "dynamo_config",
    }
)  # fmt: skip
# Legacy keys ClusterConfig.process_config still converts (so they load) but no current tool writes.
DEPRECATED_TOP_LEVEL = {"fp16": "mixed_precision", "dynamo_backend": "dynamo_config"}
# Scalars whose YAML value launch never applies: the CLI default (not None) always wins.
IGNORED_SCALARS = {"rdzv_backend": "static", "same_network": False, "enable_cpu_affinity": False}

FSDP = frozenset(
    {
        "fsdp_version", "fsdp_offload_params", "fsdp_min_num_params", "fsdp_sharding_strategy",
        "fsdp_reshard_after_forward", "fsdp_auto_wrap_policy", "fsdp_transformer_layer_cls_to_wrap",
        "fsdp_backward_prefetch", "fsdp_state_dict_type", "fsdp_forward_prefetch", "fsdp_use_orig_params",
        "fsdp_cpu_ram_efficient_loading", "fsdp_sync_module_states", "fsdp_activation_checkpointing",
        "fsdp_activation_checkpointing_offload", "fsdp_ignored_modules",
    }
)  # fmt: skip
# FSDP1 keys that FSDP2 ignores or drops, with what to do instead.
FSDP1_ONLY = {
    "fsdp_sharding_strategy": "use fsdp_reshard_after_forward: true/false (and parallelism_config for HSDP)",
    "fsdp_backward_prefetch": "remove it: FSDP2 has no such setting and always prefetches the next layer's all-gather "
    "in backward, as BACKWARD_PRE did",
    "fsdp_forward_prefetch": "remove it: FSDP2 does not implement forward prefetch (a true value raises ValueError)",
    "fsdp_sync_module_states": "remove it: FSDP2 needs no sync; with fsdp_cpu_ram_efficient_loading accelerate loads "
    "the weights on rank 0 and broadcasts them into the shards",
    "fsdp_use_orig_params": "remove it: FSDP2 always trains the original parameters (as DTensor shards)",
}
FSDP_SHARDING = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2")
WRAP_POLICIES = ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP")

DEEPSPEED = frozenset(
    {
        "deepspeed_config_file", "zero_stage", "offload_optimizer_device", "offload_param_device",
        "offload_optimizer_nvme_path", "offload_param_nvme_path", "gradient_accumulation_steps",
        "gradient_clipping", "zero3_init_flag", "zero3_save_16bit_model", "deepspeed_hostfile",
        "deepspeed_exclusion_filter", "deepspeed_inclusion_filter", "deepspeed_multinode_launcher",
        "deepspeed_moe_layer_cls_names",
    }
)  # fmt: skip
# With deepspeed_config_file these YAML keys raise ValueError at Accelerator() (_deepspeed_config_checks).
DS_FILE_FORBIDDEN = (
    "zero_stage", "offload_optimizer_device", "offload_param_device", "offload_optimizer_nvme_path",
    "offload_param_nvme_path", "gradient_accumulation_steps", "gradient_clipping", "zero3_save_16bit_model",
)  # fmt: skip

PARALLELISM = frozenset(
    {
        "parallelism_config_dp_replicate_size", "parallelism_config_dp_shard_size", "parallelism_config_tp_size",
        "parallelism_config_cp_size", "parallelism_config_cp_backend", "parallelism_config_cp_comm_strategy",
        "parallelism_config_sp_size", "parallelism_config_sp_backend", "parallelism_config_sp_seq_length",
        "parallelism_config_sp_seq_length_is_variable", "parallelism_config_sp_attn_implementation",
    }
)  # fmt: skip
DYNAMO = frozenset(
    {"dynamo_backend", "dynamo_mode", "dynamo_use_fullgraph", "dynamo_use_dynamic", "dynamo_use_regional_compilation"}
)
FP8 = frozenset(
    {
        "fp8_backend", "fp8_use_autocast_during_eval", "fp8_margin", "fp8_interval", "fp8_format",
        "fp8_amax_history_len", "fp8_amax_compute_algo", "fp8_override_linear_precision", "fp8_opt_level",
        "fp8_enable_fsdp_float8_all_gather", "fp8_pad_inner_dim",
    }
)  # fmt: skip
# Section -> (known keys, prefix launch prepends to a key that lacks it, or "" when keys are used verbatim).
SECTIONS = {
    "fsdp_config": (FSDP, "fsdp_"),
    "deepspeed_config": (DEEPSPEED, ""),
    "parallelism_config": (PARALLELISM, ""),
    "dynamo_config": (DYNAMO, "dynamo_"),
    "fp8_config": (FP8, "fp8_"),
}

DISTRIBUTED_TYPES = (
    "NO", "MULTI_GPU", "FSDP", "DEEPSPEED", "MEGATRON_LM", "XLA", "MULTI_CPU", "MULTI_XPU", "MULTI_NPU", "MULTI_MLU",
    "MULTI_SDAA", "MULTI_MUSA", "MULTI_HPU", "MULTI_NEURON",
)  # fmt: skip
# Names people write that accelerate does not know, mapped to what they mean.
DISTRIBUTED_ALIASES = {"DDP": "MULTI_GPU", "FSDP2": "FSDP", "ZERO": "DEEPSPEED", "DEEP_SPEED": "DEEPSPEED",
                       "NONE": "NO", "SINGLE_GPU": "NO", "MULTIGPU": "MULTI_GPU"}  # fmt: skip
MIXED_PRECISION = ("no", "fp16", "bf16", "fp8")
COMPUTE_ENVIRONMENTS = ("LOCAL_MACHINE", "AMAZON_SAGEMAKER")
