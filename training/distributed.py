"""How the launch config's strategy reaches the script: its name for the estimator, DeepSpeed's settings filled from
the flags, and where the model is built (GPU or host, inside or outside DeepSpeed's zero.Init)."""

from __future__ import annotations

import contextlib

from generator.catalog.strategies import FSDP1_SHARDING, from_accelerate
from generator.catalog.strategies import strategy as strategy_facts
from generator.errors import UserError


def strategy_name(accelerator) -> str:
    """The catalog's name for what the launch config asked for (generator.catalog.strategies.from_accelerate)."""
    from accelerate.utils import DistributedType

    dt = accelerator.distributed_type
    if dt == DistributedType.DEEPSPEED:
        ds = accelerator.state.deepspeed_plugin
        devices = (ds.offload_optimizer_device, ds.offload_param_device)
        offload = any(str(d).lower() not in ("none", "") for d in devices)
        found = from_accelerate("DEEPSPEED", zero_stage=int(ds.zero_stage), offload=offload)
        return found.name if found else f"zero{ds.zero_stage}"
    if dt == DistributedType.FSDP:
        pc = getattr(accelerator, "parallelism_config", None)
        hybrid = pc is not None and getattr(pc, "dp_replicate_size", 1) > 1
        reshard = accelerator.state.fsdp_plugin.reshard_after_forward
        if not isinstance(reshard, bool):  # FSDP1 ShardingStrategy
            fsdp1 = FSDP1_SHARDING.get(getattr(reshard, "name", str(reshard)).lstrip("_"))
            if fsdp1 is None:  # NO_SHARD replicates everything: DDP's memory and traffic
                return "ddp"
            reshard, hybrid = fsdp1[0], hybrid or fsdp1[1]
        return from_accelerate("FSDP", reshard=reshard, hybrid=hybrid).name
    return "ddp"


def configure_deepspeed(accelerator, args, ga: int) -> None:
    """Fill what DeepSpeed needs before prepare, and refuse a config that disagrees with the flags."""
    cfg = accelerator.state.deepspeed_plugin.deepspeed_config
    cfg_ga = cfg.get("gradient_accumulation_steps", "auto")
    if cfg_ga != "auto" and int(cfg_ga) != ga:
        raise UserError(
            f"the DeepSpeed config sets gradient_accumulation_steps={cfg_ga} but --global-batch {args.global_batch} / "
            f"(--micro-batch {args.micro_batch} x {accelerator.num_processes} processes) = {ga}; make them agree"
        )
    cfg["gradient_accumulation_steps"] = ga
    if cfg.get("gradient_clipping", "auto") == "auto":
        cfg["gradient_clipping"] = args.max_grad_norm
    zero = cfg.setdefault("zero_optimization", {})
    if int(zero.get("stage", 0)) == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True  # so the final export can gather a full model
    cfg["zero_force_ds_cpu_optimizer"] = False  # our torch AdamW is fine with optimizer offload


def build_on_gpu(args, config, strategy: str, fsdp_plugin) -> bool:
    """Where the model is built. CPU offload keeps it on the host. Pretrained weights under ZeRO-3 are partitioned as
    they load (zero.Init) and FSDP's efficient loading reads them on rank 0 only: CPU. A random init has nothing to
    read, and building 7B in fp32 on the host costs every rank ~30 GB of RAM and tens of seconds, so it goes to the
    GPU when the whole model takes at most a third of the free memory (the sharding frees it); under ZeRO-3 that also
    means building it outside zero.Init (see `outside_zero_init`)."""
    s = strategy_facts(strategy)
    if s.offload != "none":
        return False
    sharded_load = (s.framework == "deepspeed" and s.zero_stage == 3) or (
        fsdp_plugin and fsdp_plugin.cpu_ram_efficient_loading
    )
    if not sharded_load:
        return True
    if args.init != "random":
        return False
    import torch

    try:
        from generator.model import spec_from_config

        n = spec_from_config(config.to_dict(), args.model).params_total
    except Exception:
        return False
    return n * (4 if args.load_dtype == "fp32" else 2) <= torch.cuda.mem_get_info()[0] / 3


@contextlib.contextmanager
def outside_zero_init(accelerator):
    """Build the model whole, outside deepspeed.zero.Init; DeepSpeed partitions it when `prepare` starts the engine.

    Why: zero.Init draws a random init its own way (per partition, gathered onto rank 0), so a ZeRO-3 run started from
    other weights than DDP, FSDP and ZeRO-1/2 and its loss curve could not be compared with theirs (on 2x H200, loss
    11.02 vs 11.17 at step 1). Only for `--init random`: pretrained weights are the same either way.
    Accelerate 1.15's `zero3_init_context_manager(enable=False)` does not do this: it re-registers the same
    HfDeepSpeedConfig, whose stage 3 is all transformers checks. Unsetting that reference does."""
    from transformers.integrations import unset_hf_deepspeed_config

    unset_hf_deepspeed_config()
    try:
        yield
    finally:
        accelerator.state.deepspeed_plugin.set_deepspeed_weakref()  # ZeRO-3 saving and prepare read it again
