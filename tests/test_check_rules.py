"""Rules over recipe-shaped fixture configs, and --fix output validated by accelerate's own launch code."""

from pathlib import Path

import pytest
import yaml

from generator.check import CheckContext, exit_code, load_config, run_rules
from generator.check.fix import dump_config, fix_config

FIXTURES = Path(__file__).parent / "fixtures" / "configs"


def findings(name: str, ctx: CheckContext | None = None):
    cfg, dups = load_config(str(FIXTURES / name))
    return run_rules(cfg, ctx or CheckContext(duplicate_keys=dups))


def keyed(fs) -> set[tuple[str, str]]:
    return {(f.severity, f.key) for f in fs}


EXPECTED = {
    "ddp_clean.yaml": set(),
    "fsdp2_clean.yaml": set(),
    "ddp_gpu_ids_all.yaml": {("info", "same_network"), ("info", "rdzv_backend")},
    "fsdp1_sharding_strategy.yaml": {("warning", "fsdp_config.fsdp_version"), ("info", "same_network")},
    "fsdp1_keys_under_v2.yaml": {
        ("warning", "fsdp_config.fsdp_sharding_strategy"),
        ("warning", "fsdp_config.fsdp_backward_prefetch"),
        ("warning", "fsdp_config.fsdp_use_orig_params"),
    },
    "zero3_init_flag.yaml": {("info", "same_network")},
    "zero3_file_conflict.yaml": {
        ("error", "deepspeed_config.zero_stage"),
        ("error", "deepspeed_config.gradient_accumulation_steps"),
        ("error", "mixed_precision"),
        ("info", "deepspeed_config.deepspeed_config_file"),
    },
    "yaml11_booleans.yaml": {("error", "distributed_type"), ("error", "mixed_precision"), ("error", "gpu_ids")},
    "multinode_public_ip.yaml": {("warning", "rdzv_backend"), ("warning", "main_process_ip")},
    "hsdp_unprefixed.yaml": {
        ("error", "parallelism_config.dp_replicate_size"),
        ("error", "parallelism_config.dp_shard_size"),
        ("error", "gpu_ids"),
        ("warning", "fsdp_config.fsdp_auto_wrap_policy"),
    },
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_findings(name):
    got = keyed(findings(name))
    assert EXPECTED[name] <= got, f"missing {EXPECTED[name] - got}"
    if not EXPECTED[name]:
        assert exit_code(findings(name)) == 0, got


def test_every_finding_line_has_severity_key_problem_and_fix():
    for name in EXPECTED:
        for f in findings(name):
            assert f.severity in ("error", "warning", "info")
            assert f.line().startswith(f.severity) and f" {f.key}: " in f.line() and " Fix: " in f.line()


def test_exit_codes():
    assert exit_code(findings("ddp_clean.yaml")) == 0
    assert exit_code(findings("ddp_gpu_ids_all.yaml")) == 0  # notes only
    assert exit_code(findings("fsdp1_keys_under_v2.yaml")) == 1
    assert exit_code(findings("yaml11_booleans.yaml")) == 2


def test_fix_migrates_fsdp1_config_to_fsdp2():
    cfg, _ = load_config(str(FIXTURES / "fsdp1_sharding_strategy.yaml"))
    fixed, applied = fix_config(cfg, CheckContext())
    fsdp = fixed["fsdp_config"]
    assert fsdp["fsdp_version"] == 2 and fsdp["fsdp_reshard_after_forward"] is True
    assert not {"fsdp_sharding_strategy", "fsdp_backward_prefetch", "fsdp_use_orig_params"} & set(fsdp)
    assert "same_network" not in fixed and applied
    assert cfg["fsdp_config"]["fsdp_sharding_strategy"] == "FULL_SHARD"  # the input is not mutated


def test_fix_shard_grad_op_maps_to_no_reshard():
    cfg, _ = load_config(str(FIXTURES / "fsdp1_keys_under_v2.yaml"))
    fixed, _ = fix_config(cfg, CheckContext())
    assert fixed["fsdp_config"]["fsdp_reshard_after_forward"] is False


def test_fix_quotes_yaml11_booleans_and_gpu_ids():
    cfg, _ = load_config(str(FIXTURES / "yaml11_booleans.yaml"))
    fixed, _ = fix_config(cfg, CheckContext())
    text = dump_config(fixed)
    assert "distributed_type: 'NO'" in text and "mixed_precision: 'no'" in text and "gpu_ids: '0'" in text
    assert yaml.safe_load(text)["distributed_type"] == "NO"


def test_fsdp1_reshard_slot_holding_strategy_is_moved():
    cfg = {
        "distributed_type": "FSDP",
        "num_processes": 2,
        "fsdp_config": {
            "fsdp_version": 1,
            "fsdp_reshard_after_forward": "HYBRID_SHARD",
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        },
    }
    fs = run_rules(cfg)
    assert ("warning", "fsdp_config.fsdp_reshard_after_forward") in keyed(fs)
    fixed, _ = fix_config(cfg, CheckContext())
    assert fixed["fsdp_config"]["fsdp_sharding_strategy"] == "HYBRID_SHARD"


def test_gpu_ids_count_and_typo_keys():
    cfg = {
        "distributed_type": "MULTI_GPU",
        "num_processes": 4,
        "gpu_ids": "0,1",
        "num_proceses": 4,
        "fsdp_config": {"fsdp_verison": 2},
    }
    got = keyed(run_rules(cfg))
    assert ("error", "num_processes") in got and ("error", "num_proceses") in got
    assert ("warning", "fsdp_config.fsdp_verison") in got


def test_enum_typos_and_bad_precision():
    got = {f.key: f for f in run_rules({"distributed_type": "DDP", "num_processes": 2, "mixed_precision": "fp32"})}
    assert got["distributed_type"].patch[0][1] == "MULTI_GPU"
    assert got["mixed_precision"].patch[0][1] == "no"
    assert ("error", "distributed_type") in keyed(run_rules({"num_processes": 2}))


def test_deepspeed_stage_rules():
    cfg = {
        "distributed_type": "DEEPSPEED",
        "num_processes": 2,
        "deepspeed_config": {
            "zero_stage": 2,
            "offload_param_device": "cpu",
            "zero3_init_flag": True,
            "offload_optimizer_nvme_path": "/nvme",
            "zero_hpz_partition_size": 8,
        },
    }
    got = keyed(run_rules(cfg))
    assert ("warning", "deepspeed_config.offload_param_device") in got
    assert ("info", "deepspeed_config.zero3_init_flag") in got
    assert ("warning", "deepspeed_config.offload_optimizer_nvme_path") in got
    assert ("warning", "deepspeed_config.zero_hpz_partition_size") in got


def test_zero3_init_flag_false_is_reported_as_ignored_and_fixed_to_what_happens():
    cfg = {"distributed_type": "DEEPSPEED", "num_processes": 2, "deepspeed_config": {"zero_stage": 3}}
    for flag, expect in ((False, True), ("false", True), (True, False)):
        cfg["deepspeed_config"]["zero3_init_flag"] = flag
        got = [f for f in run_rules(cfg) if f.key == "deepspeed_config.zero3_init_flag"]
        assert bool(got and got[0].severity == "warning") is expect, (flag, got)
    cfg["deepspeed_config"]["zero3_init_flag"] = False
    fixed, _ = fix_config(cfg, CheckContext())
    assert fixed["deepspeed_config"]["zero3_init_flag"] is True


def test_accelerate_registers_the_zero3_config_even_with_the_flag_off():
    """The library fact the rule above rests on (accelerate 1.15, transformers 5): needs DeepSpeed installed, since
    transformers' HfDeepSpeedConfig checks for it."""
    pytest.importorskip("deepspeed")
    from accelerate.utils import DeepSpeedPlugin
    from transformers.integrations import is_deepspeed_zero3_enabled, unset_hf_deepspeed_config

    unset_hf_deepspeed_config()
    plugin = DeepSpeedPlugin(zero_stage=3, zero3_init_flag=False)
    try:
        plugin.select(_from_accelerator_state=True)
        assert plugin.zero3_init_flag is False and is_deepspeed_zero3_enabled()
    finally:
        unset_hf_deepspeed_config()


def test_multinode_rules():
    base = {"distributed_type": "MULTI_GPU", "num_processes": 16, "num_machines": 2}
    assert ("error", "main_process_ip") in keyed(run_rules(base))
    assert ("error", "main_process_ip") in keyed(run_rules({**base, "main_process_ip": "127.0.0.1"}))
    assert not {k for k in keyed(run_rules({**base, "main_process_ip": "10.0.0.1"})) if k[1] == "main_process_ip"}
    assert ("error", "machine_rank") in keyed(run_rules({**base, "main_process_ip": "10.0.0.1", "machine_rank": 2}))


def test_fsdp2_sync_module_states_false_is_a_launch_error():
    cfg = {
        "distributed_type": "FSDP",
        "num_processes": 2,
        "fsdp_config": {
            "fsdp_version": 2,
            "fsdp_sync_module_states": False,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        },
    }
    assert ("error", "fsdp_config.fsdp_sync_module_states") in keyed(run_rules(cfg))


# --- accelerate's own launch code agrees: broken fixtures fail it, their --fix output passes it -------------------


def _launch(path: Path):
    launch = pytest.importorskip("accelerate.commands.launch")
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import prepare_deepspeed_cmd_env, prepare_multi_gpu_env, prepare_simple_launcher_cmd_env

    load_config_from_file(str(path))
    args = launch.launch_command_parser().parse_args(["--config_file", str(path), "train.py"])
    args, defaults, mp_from_cfg = launch._validate_launch_command(args)
    if args.use_deepspeed:
        fields = list(defaults.deepspeed_config) + (["mixed_precision"] if mp_from_cfg else [])
        args.deepspeed_fields_from_accelerate_config = ",".join(fields)
        return prepare_deepspeed_cmd_env(args)[1]
    if args.multi_gpu or args.use_fsdp:
        return prepare_multi_gpu_env(args)
    return prepare_simple_launcher_cmd_env(args)[1]


@pytest.mark.parametrize(
    "name", ["yaml11_booleans.yaml", "hsdp_unprefixed.yaml", "fsdp1_sharding_strategy.yaml", "zero3_init_flag.yaml"]
)
def test_fixed_configs_pass_accelerate_launch(name, tmp_path):
    cfg, _ = load_config(str(FIXTURES / name))
    fixed, _ = fix_config(cfg, CheckContext())
    out = tmp_path / name
    out.write_text(dump_config(fixed))
    env = _launch(out)
    if fixed["distributed_type"] == "FSDP":
        assert env["FSDP_VERSION"] == "2"
    if fixed.get("gpu_ids") not in (None, "all"):
        assert env["CUDA_VISIBLE_DEVICES"] == fixed["gpu_ids"]


@pytest.mark.parametrize("name", ["yaml11_booleans.yaml", "hsdp_unprefixed.yaml"])
def test_broken_fixtures_fail_accelerate_launch(name):
    with pytest.raises((AttributeError, ValueError)):
        _launch(FIXTURES / name)
