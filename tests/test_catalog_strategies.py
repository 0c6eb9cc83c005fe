"""The strategy catalog against what accelerate, DeepSpeed and torch make of it, and the planner's use of its fields.

Every catalog strategy is emitted through the real emitter and read back by accelerate's own launch path and plugins:
the stage, offload, reshard and hybrid fields must be what accelerate builds, and from_accelerate (what train.py and
`check` call) must name the same strategy again.
"""

from __future__ import annotations

import pytest
from accelerate.utils.dataclasses import DistributedType
from emit_harness import child_environ, free_port, launch_level2, load_level1
from plan_factory import make_plan

from generator.catalog import strategies as catalog
from generator.check.view import sharded
from generator.check.view import strategy as check_strategy
from generator.emit import render, write
from generator.estimate import Placement, Workload, applicable

PORT = free_port()


def _plan(s: catalog.Strategy):
    if s.hybrid:
        return make_plan(s.name, gpu_ids=(0, 1, 2, 3), hsdp_replicate=2, hsdp_shard=2, main_process_port=PORT)
    return make_plan(s.name, gpu_ids=(0, 1, 2, 3), main_process_port=PORT)


@pytest.fixture(params=catalog.NAMES)
def read_back(request, tmp_path, monkeypatch):
    """(catalog entry, the YAML as a dict, what accelerate's plugins built from the launch environment)."""
    import yaml
    from accelerate.parallelism_config import ParallelismConfig
    from accelerate.utils import DeepSpeedPlugin, FullyShardedDataParallelPlugin

    monkeypatch.chdir(tmp_path)
    s = catalog.strategy(request.param)
    plan = _plan(s)
    em = render(plan, f"{s.name}.yaml")
    write(em, force=False)
    cfg = load_level1(em.config_path)
    _, env = launch_level2(em.config_path)
    seen: dict = {"distributed_type": cfg.distributed_type, "num_processes": cfg.num_processes}
    with child_environ(env):
        if env.get("ACCELERATE_USE_DEEPSPEED") == "true":
            seen["deepspeed"] = DeepSpeedPlugin()
        if env.get("ACCELERATE_USE_FSDP") == "true":
            seen["fsdp"] = FullyShardedDataParallelPlugin()
        if env.get("ACCELERATE_USE_PARALLELISM_CONFIG") == "true":
            seen["parallelism"] = ParallelismConfig()
    with open(em.config_path, encoding="utf-8") as f:
        raw = yaml.safe_load(f)
    return s, raw, seen


def test_accelerate_reads_the_catalogs_framework_stage_offload_reshard_and_hybrid(read_back):
    s, _, seen = read_back
    assert seen["distributed_type"] == DistributedType(catalog.accelerate_type(s, seen["num_processes"]))
    ds, fsdp, par = seen.get("deepspeed"), seen.get("fsdp"), seen.get("parallelism")
    assert (ds is not None) == (s.framework == "deepspeed")
    assert (fsdp is not None) == (s.framework == "fsdp")
    assert (par is not None and par.dp_replicate_size > 1) == s.hybrid
    if ds is not None:
        from deepspeed.runtime.zero.config import ZeroStageEnum

        zero = ds.deepspeed_config["zero_optimization"]
        assert zero["stage"] == s.zero_stage
        stage = ZeroStageEnum(zero["stage"])  # DeepSpeed's own names for what each stage partitions
        assert s.shards_optimizer == (stage >= ZeroStageEnum.optimizer_states)
        assert s.shards_gradients == (stage >= ZeroStageEnum.gradients)
        assert s.shards_parameters == (stage >= ZeroStageEnum.weights)
        assert ds.hf_ds_config.is_zero3() == s.shards_parameters
        assert (zero["offload_optimizer"]["device"] != "none") == (s.offload != "none")
        assert (zero["offload_param"]["device"] != "none") == s.offloads_params
        assert ds.hf_ds_config.is_offload() == (s.offload != "none")
    if fsdp is not None:
        assert fsdp.fsdp_version == 2
        assert fsdp.reshard_after_forward is s.reshard_after_forward


def test_from_accelerate_names_the_emitted_strategy_again(read_back):
    """What train.py will call with the plugins of a running job, and what `check` reads from the YAML."""
    s, raw, seen = read_back
    ds, fsdp, par = seen.get("deepspeed"), seen.get("fsdp"), seen.get("parallelism")
    found = catalog.from_accelerate(
        seen["distributed_type"],
        zero_stage=int(ds.zero_stage) if ds else None,
        offload=bool(ds) and (ds.offload_optimizer_device != "none" or ds.offload_param_device != "none"),
        reshard=fsdp.reshard_after_forward if fsdp else True,
        hybrid=par is not None and par.dp_replicate_size > 1,
    )
    assert found is s
    assert check_strategy(raw) == s.name
    assert sharded(raw) == (s.gathers_per_micro_step == 2)


@pytest.mark.parametrize("s", catalog.ALL, ids=catalog.NAMES)
@pytest.mark.parametrize("processes", [1, 4])
def test_from_accelerate_round_trips_plain_values(s, processes):
    kind = catalog.accelerate_type(s, processes)
    back = catalog.from_accelerate(kind, s.zero_stage, s.offload != "none", s.reshard_after_forward, s.hybrid)
    assert back is s
    assert (
        catalog.from_accelerate(
            DistributedType(kind), s.zero_stage, s.offload != "none", s.reshard_after_forward, s.hybrid
        )
        is s
    )


def test_from_accelerate_edge_cases():
    assert catalog.from_accelerate("DEEPSPEED", zero_stage=0).framework == "ddp"  # stage 0 is plain data parallel
    assert catalog.from_accelerate("DEEPSPEED", zero_stage=None) is None  # the stage lives in a DeepSpeed JSON
    assert catalog.from_accelerate("DEEPSPEED", zero_stage=1, offload=True).zero_stage == 1  # no ZeRO-1 offload entry
    assert catalog.from_accelerate("MULTI_CPU").framework == "ddp"


def test_fsdp1_sharding_covers_torchs_enum_by_name_and_value():
    from torch.distributed.fsdp import ShardingStrategy

    for member in ShardingStrategy:
        name = member.name.lstrip("_")
        assert catalog.FSDP1_SHARDING[str(member.value)] == catalog.FSDP1_SHARDING[name]
    assert set(catalog.FSDP1_SHARDING) == {m.name.lstrip("_") for m in ShardingStrategy} | {
        str(m.value) for m in ShardingStrategy
    }
    assert catalog.FSDP1_SHARDING["NO_SHARD"] is None


def test_the_one_gpu_twin_is_what_the_estimator_offers_instead():
    one = Placement(num_gpus_per_machine=1, gpu_name="NVIDIA H200", gpu_memory_gb=141.0, busbw_gbps=0.0)
    for s in catalog.ALL:
        if s.one_gpu_twin is None:
            continue
        twin = catalog.strategy(s.one_gpu_twin)
        assert applicable(s.name, Workload(), one) is not None
        assert applicable(twin.name, Workload(), one) is None
        assert (twin.framework, twin.offload, twin.one_gpu_twin) == (s.framework, s.offload, None)


def test_unknown_names_are_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="zero2_offload"):
        catalog.strategy("zero4")
    assert len(set(catalog.NAMES)) == len(catalog.ALL)
