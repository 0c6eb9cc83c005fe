"""`check` on tensor/context/sequence-parallel configs: one hand-made bad config per rule, and the planner's own
config clean (generator.check.rules_parallel)."""

from __future__ import annotations

import copy

import pytest

from generator.check import CheckContext, run_rules
from generator.estimate.types import Workload
from generator.model import load_model
from generator.topology.machines import load_machine

BASE = {
    "compute_environment": "LOCAL_MACHINE",
    "distributed_type": "FSDP",
    "num_machines": 1,
    "machine_rank": 0,
    "num_processes": 8,
    "gpu_ids": "0,1,2,3,4,5,6,7",
    "mixed_precision": "bf16",
    "main_process_port": 29500,
    "use_cpu": False,
    "fsdp_config": {
        "fsdp_version": 2,
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_reshard_after_forward": True,
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        "fsdp_transformer_layer_cls_to_wrap": "LlamaDecoderLayer",
    },
}


def cfg_with(par: dict, **top) -> dict:
    cfg = copy.deepcopy(BASE)
    cfg.update(top)
    sizes = {"dp_replicate_size": 1, "dp_shard_size": 1, "tp_size": 1, "cp_size": 1, **par}
    cfg["parallelism_config"] = {f"parallelism_config_{k}": v for k, v in sizes.items()}
    return cfg


def parallel_findings(cfg, ctx=None):
    return [f for f in run_rules(cfg, ctx or CheckContext()) if f.rule == "parallel"]


def one(cfg, severity: str, key_part: str, text: str, ctx=None):
    fs = [f for f in parallel_findings(cfg, ctx) if f.severity == severity and key_part in f.key and text in f.problem]
    assert fs, [f.line() for f in parallel_findings(cfg, ctx)]


def test_sizes_that_do_not_multiply_to_the_processes():
    one(cfg_with({"tp_size": 4, "dp_shard_size": 4}), "error", "parallelism_config", "num_processes is 8")


def test_cp_and_sp_together():
    one(cfg_with({"cp_size": 2, "sp_size": 2, "dp_shard_size": 2}), "error", "sp_size", "mutually exclusive")


def test_tp_over_pure_replication():
    one(cfg_with({"tp_size": 4, "dp_replicate_size": 2}), "error", "dp_shard_size", "pure replication")


def test_tp_over_every_gpu_leaves_fsdp_nothing_to_shard():
    one(cfg_with({"tp_size": 8}), "error", "dp_shard_size", "nothing to shard across")


def test_unknown_cp_backend():
    one(cfg_with({"cp_size": 8, "cp_backend": "ring"}), "error", "cp_backend", "not a context-parallel backend")


@pytest.mark.parametrize("dist", ["MULTI_GPU", "DEEPSPEED"])
def test_cp_without_fsdp2(dist):
    cfg = cfg_with({"cp_size": 8}, distributed_type=dist)
    cfg.pop("fsdp_config")
    one(cfg, "error", "cp_size", "needs FSDP2")


def test_cp_under_fsdp1():
    cfg = cfg_with({"cp_size": 8})
    cfg["fsdp_config"]["fsdp_version"] = 1
    one(cfg, "error", "cp_size", "fsdp_version 1")


def test_sp_without_deepspeed():
    one(cfg_with({"sp_size": 8}), "error", "sp_size", "needs DeepSpeed")


def test_keys_accelerate_ignores():
    cfg = cfg_with({"tp_size": 4, "dp_shard_size": 2, "cp_comm_strategy": "alltoall", "sp_seq_length": 4096})
    one(cfg, "warning", "cp_comm_strategy", "ignored")
    one(cfg, "warning", "sp_seq_length", "ignored")


def test_groups_that_straddle_islands():
    ctx = CheckContext(topo=load_machine("h200-nvl-8"))
    one(cfg_with({"tp_size": 8}), "warning", "tp_size", "spans", ctx)
    # TP 4 inside each group of four is fine; TP 4 over interleaved ids is not
    assert not [f for f in parallel_findings(cfg_with({"tp_size": 4, "dp_shard_size": 2}), ctx) if "spans" in f.problem]
    one(cfg_with({"tp_size": 4, "dp_shard_size": 2}, gpu_ids="0,4,1,5,2,6,3,7"), "warning", "tp_size", "spans", ctx)
    one(cfg_with({"cp_size": 8}), "warning", "cp_size", "spans", ctx)


def test_memory_that_will_not_fit():
    model = load_model("llama-3.1-8b")
    ctx = CheckContext(
        topo=load_machine("hgx-h200-8"),
        model=model,
        workload=Workload(method="lora", seq_len=131072, load_dtype="bf16", grad_checkpointing=True),
    )
    one(cfg_with({"cp_size": 2, "dp_shard_size": 4}), "error", "parallelism_config", "GB usable", ctx)
    assert not [f for f in parallel_findings(cfg_with({"cp_size": 8}), ctx) if "usable" in f.problem]
    # the plain memory rule stays out of it (it would price a data-parallel run at the whole sequence)
    assert not [f for f in run_rules(cfg_with({"cp_size": 8}), ctx) if f.rule == "memory_fit"]


def test_the_planners_config_is_clean(tmp_path):
    from generator.check import load_config
    from generator.emit import render, write
    from generator.plan.planner import make_plan
    from generator.plan.types import PlanRequest

    plan = make_plan(load_machine("hgx-h200-8"), load_model("llama-3.1-8b"), PlanRequest(method="lora", seq_len=131072))
    path = tmp_path / "c.yaml"
    write(render(plan, str(path)), force=True)
    cfg, _ = load_config(str(path))
    ctx = CheckContext(topo=load_machine("hgx-h200-8"), model=plan.model, workload=plan.workload)
    assert [f for f in run_rules(cfg, ctx) if f.severity != "info"] == []
