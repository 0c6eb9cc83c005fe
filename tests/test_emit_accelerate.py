"""Every emitted variant, validated by accelerate's own code at three levels: the schema loader, the launch path
(YAML merged into launch args, child environment exported) and the plugins built from that environment.

The launch helpers are private API checked against accelerate 1.15; pyproject.toml pins accelerate>=1.15,<1.16.
"""

from __future__ import annotations

import os
import shlex

import accelerate
import pytest
from accelerate.utils import DeepSpeedPlugin, FullyShardedDataParallelPlugin
from accelerate.utils.dataclasses import DistributedType
from emit_harness import (
    check_three_levels,
    child_environ,
    free_port,
    launch_level2,
    load_level1,
    shard_groups,
    torchrun_config,
)
from plan_factory import variants

from generator.emit import render, write

PORT = free_port()
VARIANTS = variants(PORT)
DS_STAGE = {"zero1": 1, "zero2": 2, "zero3": 3, "zero2_offload": 2, "zero3_offload": 3}


def test_accelerate_version_is_the_checked_one():
    assert accelerate.__version__.startswith("1.15."), "re-check the private launch helpers, then widen the pin"


@pytest.fixture(params=sorted(VARIANTS))
def emitted(request, tmp_path, monkeypatch):
    """Written under a relative path, launched from its directory (DS JSON paths are relative to the launch dir)."""
    monkeypatch.chdir(tmp_path)
    plan = VARIANTS[request.param]
    em = render(plan, f"configs/{request.param}.yaml")
    write(em, force=False)
    return request.param, plan, em


def test_level1_schema(emitted):
    name, plan, em = emitted
    cfg = load_level1(em.config_path)
    assert cfg.num_processes == plan.num_processes
    assert cfg.num_machines == plan.num_machines
    assert cfg.gpu_ids == ",".join(map(str, plan.gpu_ids))
    expected = {"ddp": "MULTI_GPU" if plan.num_processes > 1 else "NO", "fsdp": "FSDP", "fsdp_grad_op": "FSDP"}
    expected |= {"hsdp": "FSDP"} | dict.fromkeys(DS_STAGE, "DEEPSPEED")
    assert cfg.distributed_type == DistributedType(expected[plan.strategy])


def test_level2_launch_env(emitted):
    name, plan, em = emitted
    args, env = launch_level2(em.config_path)
    assert env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, plan.gpu_ids))
    per_node = len(plan.gpu_ids)
    if plan.num_processes > 1:
        assert int(args.nproc_per_node) == per_node
    if plan.num_machines > 1:
        assert int(args.nnodes) == plan.num_machines and args.node_rank == plan.machine_rank
    if plan.strategy in ("fsdp", "fsdp_grad_op", "hsdp"):
        assert env["ACCELERATE_USE_FSDP"] == "true"
        assert env["FSDP_VERSION"] == "2"
        assert env["FSDP_RESHARD_AFTER_FORWARD"] == str(plan.strategy != "fsdp_grad_op").lower()
        assert env["FSDP_AUTO_WRAP_POLICY"] == "TRANSFORMER_BASED_WRAP"
        assert env["FSDP_TRANSFORMER_CLS_TO_WRAP"] == "MistralDecoderLayer"
        assert env["FSDP_STATE_DICT_TYPE"] == "SHARDED_STATE_DICT"
        assert env["FSDP_OFFLOAD_PARAMS"] == "false"
        assert env["FSDP_CPU_RAM_EFFICIENT_LOADING"] == "true"
        assert env["FSDP_ACTIVATION_CHECKPOINTING"] == str(plan.workload.grad_checkpointing).lower()
        assert env["ACCELERATE_MIXED_PRECISION"] == "bf16"
    if plan.strategy == "hsdp":
        assert env["ACCELERATE_USE_PARALLELISM_CONFIG"] == "true"
        assert env["PARALLELISM_CONFIG_DP_REPLICATE_SIZE"] == str(plan.hsdp_replicate)
        assert env["PARALLELISM_CONFIG_DP_SHARD_SIZE"] == str(plan.hsdp_shard)
    else:
        assert "ACCELERATE_USE_PARALLELISM_CONFIG" not in env
    if plan.strategy in DS_STAGE:
        assert env["ACCELERATE_USE_DEEPSPEED"] == "true"
        json_path = next((p for p in em.files if p.endswith(".ds.json")), None)
        if json_path:
            assert env["ACCELERATE_DEEPSPEED_CONFIG_FILE"] == json_path
            assert "ACCELERATE_DEEPSPEED_ZERO_STAGE" not in env
        else:
            assert env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == str(DS_STAGE[plan.strategy])
            assert env["ACCELERATE_GRADIENT_ACCUMULATION_STEPS"] == str(plan.workload.grad_accum)
            assert env["ACCELERATE_MIXED_PRECISION"] == "bf16"
        assert env["ACCELERATE_DEEPSPEED_ZERO3_INIT"] == str(DS_STAGE[plan.strategy] == 3).lower()
    else:
        assert "ACCELERATE_USE_DEEPSPEED" not in env


def test_level2_rejects_a_single_id_multi_gpu_only_where_accelerate_checks(tmp_path):
    """Sanity check of the harness itself: accelerate's one gpu_ids check fires through it."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("distributed_type: MULTI_GPU\nnum_processes: 2\ngpu_ids: '0'\nnum_machines: 1\n")
    with pytest.raises(ValueError, match="Less than two GPU ids"):
        launch_level2(str(bad))


def test_level2_launch_flags_on_the_command_line_reach_torchrun(emitted):
    """The flags the command adds (accelerate ignores them in a YAML) must give a working rendezvous."""
    name, plan, em = emitted
    words = shlex.split(em.launch_command)
    flags = tuple(words[words.index("--config_file") + 2 : words.index("train.py")])
    args, _ = launch_level2(em.config_path, flags)
    assert args.enable_cpu_affinity == ("--enable_cpu_affinity" in flags)
    if plan.num_machines == 1:
        return
    if plan.strategy in DS_STAGE:  # torchrun on each machine, as for FSDP/DDP; pdsh would need ssh and a hostfile
        assert args.deepspeed_multinode_launcher == "standard"
    cfg = torchrun_config(args)
    assert cfg.rdzv_backend == "static"
    assert cfg.rdzv_endpoint == f"{plan.main_process_ip}:{PORT}"
    assert cfg.rdzv_configs["rank"] == plan.machine_rank
    assert (cfg.min_nodes, cfg.max_nodes, cfg.nproc_per_node) == (2, 2, len(plan.gpu_ids))


def test_c10d_with_same_network_loses_the_endpoint(tmp_path, monkeypatch):
    """Why the command uses a static rendezvous: with --rdzv_backend c10d --same_network accelerate passes
    master_addr, which torchrun's c10d ignores; every machine would rendezvous with itself."""
    monkeypatch.chdir(tmp_path)
    em = render(VARIANTS["multi_node_ddp"], "mn.yaml")
    write(em, force=False)
    args, _ = launch_level2("mn.yaml", ("--rdzv_backend", "c10d", "--same_network"))
    assert torchrun_config(args).rdzv_endpoint == ""


def test_level3_plugins(emitted):
    name, plan, em = emitted
    args, env = launch_level2(em.config_path)
    with child_environ(env):
        if plan.strategy in ("fsdp", "fsdp_grad_op", "hsdp"):
            fsdp = FullyShardedDataParallelPlugin()
            assert fsdp.fsdp_version == 2
            assert fsdp.reshard_after_forward is (plan.strategy != "fsdp_grad_op")
            assert fsdp.transformer_cls_names_to_wrap == ["MistralDecoderLayer"]
            assert fsdp.auto_wrap_policy.__name__ == "transformer_auto_wrap_policy"
            assert fsdp.state_dict_type.name == "SHARDED_STATE_DICT"
            assert fsdp.activation_checkpointing is plan.workload.grad_checkpointing
            assert fsdp.cpu_ram_efficient_loading is True
            assert type(fsdp.cpu_offload).__name__ == "OffloadPolicy"  # not CPUOffloadPolicy
        if plan.strategy == "hsdp":
            from accelerate.parallelism_config import ParallelismConfig

            pc = ParallelismConfig()
            assert pc._get_mesh() == (("dp_replicate", "dp_shard"), (plan.hsdp_replicate, plan.hsdp_shard))
            assert pc.total_size == plan.num_processes  # checked only inside Accelerator(); check it here
        if plan.strategy in DS_STAGE:
            ds = DeepSpeedPlugin()
            ds.set_mixed_precision(os.environ["ACCELERATE_MIXED_PRECISION"])
            zero = ds.deepspeed_config["zero_optimization"]
            assert ds.zero_stage == zero["stage"] == DS_STAGE[plan.strategy]
            offload = {"zero2_offload": ("cpu", "none"), "zero3_offload": ("cpu", "cpu")}.get(plan.strategy)
            assert (ds.offload_optimizer_device, ds.offload_param_device) == (offload or ("none", "none"))
            assert ds.zero3_init_flag is (DS_STAGE[plan.strategy] == 3)
            assert ds.deepspeed_config["bf16"]["enabled"] is True
            assert ds.deepspeed_config["gradient_accumulation_steps"] == plan.workload.grad_accum
            json_variant = any(p.endswith(".ds.json") for p in em.files)
            assert ds.deepspeed_config["gradient_clipping"] == ("auto" if json_variant else 1.0)
            if DS_STAGE[plan.strategy] == 3:
                assert ds.zero3_save_16bit_model is True
            if any(p.endswith(".ds.json") for p in em.files):
                expected = plan.hsdp_shard if plan.num_machines == 1 else len(plan.gpu_ids)
                assert zero["zero_hpz_partition_size"] == expected
            _fill_like_prepare(ds, plan)
            assert "auto" not in repr(ds.deepspeed_config), ds.deepspeed_config
            assert ds.deepspeed_config["gradient_clipping"] == 1.0


def _fill_like_prepare(ds, plan) -> None:
    """The "auto" filling Accelerator._prepare_deepspeed does (it also walks the "_comment" header key)."""
    h, w = plan.model.hidden_size, plan.workload
    ds.deepspeed_config_process(
        must_match=False,
        **{
            "gradient_clipping": 1.0,
            "zero_optimization.stage3_gather_16bit_weights_on_model_save": False,
            "train_micro_batch_size_per_gpu": w.micro_batch,
            "train_batch_size": w.micro_batch * w.grad_accum * plan.num_processes,
            "zero_optimization.reduce_bucket_size": h * h,
            "zero_optimization.stage3_prefetch_bucket_size": int(0.9 * h * h),
            "zero_optimization.stage3_param_persistence_threshold": 10 * h,
        },
    )


@pytest.mark.parametrize("name", ["hsdp", "multi_node_hsdp"])
def test_hsdp_shard_groups_are_islands(name):
    """Accelerate's mesh puts contiguous ranks in a shard group; with the emitted gpu_ids order each group is one
    NVLink island (single machine) or one machine (multi-node)."""
    plan = VARIANTS[name]
    per_node = len(plan.gpu_ids)
    groups = shard_groups(plan.hsdp_replicate, plan.hsdp_shard)
    where = [{(r // per_node, plan.gpu_ids[r % per_node]) for r in g} for g in groups]
    if name == "hsdp":
        assert where == [{(0, g) for g in (0, 2, 4, 6)}, {(0, g) for g in (1, 3, 5, 7)}]
    else:
        assert where == [{(m, g) for g in range(8)} for m in (0, 1)]


def test_forbidden_keys_would_be_rejected(tmp_path, monkeypatch):
    """The rule the DS-JSON variant obeys, shown with accelerate: any of these next to deepspeed_config_file fails."""
    import yaml

    monkeypatch.chdir(tmp_path)
    em = render(VARIANTS["zero3_hpz"], "z.yaml")
    write(em, force=False)
    for key, where in [("zero_stage", "ds"), ("gradient_clipping", "ds"), ("mixed_precision", "top")]:
        cfg = yaml.safe_load((tmp_path / "z.yaml").read_text())
        if where == "ds":
            cfg["deepspeed_config"][key] = 3 if key == "zero_stage" else 1.0
        else:
            cfg[key] = "bf16"
        (tmp_path / "bad.yaml").write_text(yaml.safe_dump(cfg))
        _, env = launch_level2("bad.yaml")
        with child_environ(env), pytest.raises(ValueError, match="deepspeed_config_file"):
            DeepSpeedPlugin()


def test_generic_three_level_check_accepts_every_variant(emitted, monkeypatch):
    """The generic check used on committed configs (test_emit_committed_configs) works on every variant."""
    name, plan, em = emitted
    assert check_three_levels(em.config_path)["num_processes"] == plan.num_processes


@pytest.mark.parametrize("name", sorted(n for n, p in VARIANTS.items() if p.strategy in DS_STAGE))
def test_deepspeed_accepts_the_filled_config(name, tmp_path, monkeypatch):
    """DeepSpeed's own config parser (optional dependency: skipped where it is not installed) accepts the config
    Accelerate hands it, "_comment" header key and ZeRO++ keys included. Checked with deepspeed 0.19.8."""
    deepspeed_config = pytest.importorskip("deepspeed.runtime.config")
    monkeypatch.chdir(tmp_path)
    plan = VARIANTS[name]
    em = render(plan, "c.yaml")
    write(em, force=False)
    _, env = launch_level2("c.yaml")
    with child_environ(env):
        ds = DeepSpeedPlugin()
        ds.set_mixed_precision(os.environ["ACCELERATE_MIXED_PRECISION"])
    _fill_like_prepare(ds, plan)
    config = dict(ds.deepspeed_config)
    del config["train_batch_size"]  # no process group here: DeepSpeed sees world size 1 and recomputes it
    parsed = deepspeed_config.DeepSpeedConfig(config)
    assert parsed.zero_optimization_stage == DS_STAGE[plan.strategy]
    assert parsed.gradient_accumulation_steps == plan.workload.grad_accum
    assert parsed.bfloat16_config.enabled is True
    hpz = ds.deepspeed_config["zero_optimization"].get("zero_hpz_partition_size", 1)
    assert parsed.zero_config.zero_hpz_partition_size == hpz
