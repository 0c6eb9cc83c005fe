"""`check --fix` on FSDP1-style configs does what its findings say (issue 19 item 11): every FSDP1 key is mapped to
its FSDP2 meaning (sharding strategy -> fsdp_reshard_after_forward, HYBRID_* across machines -> the parallelism_config
mesh), every changed key is listed with why, and the result loads and launches through accelerate's own code."""

import re
from pathlib import Path

import pytest
import yaml
from emit_harness import child_environ, free_port, launch_level2, load_level1

from generator.cli import main

FSDP1_KEYS = ("fsdp_sharding_strategy", "fsdp_use_orig_params", "fsdp_sync_module_states", "fsdp_forward_prefetch")


def fsdp1_config(tmp_path, strategy: str, machines: int) -> str:
    cfg = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": "FSDP",
        "fsdp_config": {
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_backward_prefetch_policy": "BACKWARD_PRE",  # the pre-0.20 spelling recipe repos still carry
            "fsdp_forward_prefetch": False,
            "fsdp_offload_params": False,
            "fsdp_sharding_strategy": strategy,
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_sync_module_states": True,
            "fsdp_use_orig_params": True,
            "fsdp_transformer_layer_cls_to_wrap": "MistralDecoderLayer",
        },
        "gpu_ids": "0,1,2,3,4,5,6,7",
        "machine_rank": 0,
        "main_process_port": free_port(),
        "mixed_precision": "bf16",
        "num_machines": machines,
        "num_processes": 8 * machines,
        "use_cpu": False,
    }
    if machines > 1:
        cfg["main_process_ip"] = "10.0.0.1"  # a private address: check refuses loopback for several machines
    path = tmp_path / "fsdp1.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return str(path)


def fix(tmp_path, capsys, src: str) -> tuple[int, str, dict]:
    out = tmp_path / "fixed.yaml"
    code = main(["check", src, "--machine", "hgx-h200-8", "--fix", "--output", str(out)])
    return code, capsys.readouterr().out, yaml.safe_load(out.read_text())


def listed(output: str) -> dict[str, str]:
    """key -> its change line, from the lines --fix prints under 'wrote ...'."""
    tail = output.split("key(s) changed", 1)[1].splitlines()[1:]
    return {m.group(1): line for line in tail if (m := re.match(r"  ([\w.]+): ", line))}


def flat(cfg: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in cfg.items():
        out |= flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k: v}
    return out


@pytest.mark.parametrize(
    ("strategy", "machines", "reshard", "mesh"),
    [
        ("FULL_SHARD", 1, True, None),
        ("SHARD_GRAD_OP", 1, False, None),
        ("HYBRID_SHARD", 1, True, None),  # one machine: FSDP1's hybrid group is the machine, i.e. plain sharding
        ("HYBRID_SHARD", 2, True, (2, 8)),
        ("HYBRID_SHARD_ZERO2", 2, False, (2, 8)),
    ],
)
def test_fix_maps_every_fsdp1_key_and_lists_every_change(tmp_path, capsys, strategy, machines, reshard, mesh):
    src = fsdp1_config(tmp_path, strategy, machines)
    code, output, fixed = fix(tmp_path, capsys, src)
    assert code == 0, output
    fsdp = fixed["fsdp_config"]
    assert fsdp["fsdp_version"] == 2 and fsdp["fsdp_reshard_after_forward"] is reshard
    assert not set(FSDP1_KEYS + ("fsdp_backward_prefetch", "fsdp_backward_prefetch_policy")) & set(fsdp)
    par = fixed.get("parallelism_config", {})
    got = (par.get("parallelism_config_dp_replicate_size"), par.get("parallelism_config_dp_shard_size"))
    assert got == (mesh or (None, None))

    # one line per changed key, and exactly the keys that differ
    before, after = flat(yaml.safe_load(Path(src).read_text())), flat(fixed)
    diff = {k for k in before.keys() | after.keys() if before.get(k, "<absent>") != after.get(k, "<absent>")}
    lines = listed(output)
    assert set(lines) == diff
    assert f"removed (was '{strategy}')" in lines["fsdp_config.fsdp_sharding_strategy"]
    assert f"fsdp_reshard_after_forward: {str(reshard).lower()}" in lines["fsdp_config.fsdp_sharding_strategy"]
    assert "fsdp_backward_prefetch" in lines["fsdp_config.fsdp_backward_prefetch_policy"]
    assert "BACKWARD_PRE" in lines["fsdp_config.fsdp_backward_prefetch_policy"]  # what FSDP2 does instead
    assert "original parameters" in lines["fsdp_config.fsdp_use_orig_params"]
    assert "forward prefetch" in lines["fsdp_config.fsdp_forward_prefetch"]
    assert "rank 0" in lines["fsdp_config.fsdp_sync_module_states"]
    assert "rename it to fsdp_backward_prefetch" not in output  # FSDP2 would ignore the renamed key too


def test_the_fixed_config_loads_and_launches_through_accelerate(tmp_path, capsys):
    from accelerate.parallelism_config import ParallelismConfig
    from accelerate.utils import FullyShardedDataParallelPlugin

    _, _, fixed = fix(tmp_path, capsys, fsdp1_config(tmp_path, "HYBRID_SHARD", 2))
    path = str(tmp_path / "fixed.yaml")
    assert load_level1(path).num_processes == 16
    _, env = launch_level2(path)
    with child_environ(env):
        plugin = FullyShardedDataParallelPlugin()
        assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is True
        mesh = ParallelismConfig()
        assert (mesh.dp_replicate_size, mesh.dp_shard_size) == (2, 8)
