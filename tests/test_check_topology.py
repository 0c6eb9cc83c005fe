"""Wiring and memory rules against the bundled reference machines (topology engine + estimator, no GPU needed)."""

import pytest

from generator.check import CheckContext, run_rules
from generator.check.fix import fix_config
from generator.estimate.types import Workload
from generator.model import load_model
from generator.topology import load_topology


def ctx(machine: str, model: str | None = None, **workload) -> CheckContext:
    return CheckContext(
        topo=load_topology(machine=machine),
        model=load_model(model) if model else None,
        workload=Workload(**workload) if workload else Workload(),
    )


def by_rule(fs) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in fs:
        out.setdefault(f.rule, []).append(f)
    return out


FSDP2 = {"fsdp_version": 2, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "fsdp_reshard_after_forward": True}


def test_ids_spanning_islands_when_one_island_holds_the_job():
    cfg = {"distributed_type": "MULTI_GPU", "num_processes": 4, "gpu_ids": "0,1,4,5"}
    fs = by_rule(run_rules(cfg, ctx("h200-nvl-8")))
    [f] = fs["islands_spanned"]
    assert f.severity == "warning" and f.patch[0][1] == "0,1,2,3"
    fixed, _ = fix_config(cfg, ctx("h200-nvl-8"))
    assert fixed["gpu_ids"] == "0,1,2,3"
    assert "islands_spanned" not in by_rule(run_rules({**cfg, "gpu_ids": "4,5,6,7"}, ctx("h200-nvl-8")))


def test_all_eight_gpus_cannot_avoid_spanning_so_no_island_finding():
    cfg = {"distributed_type": "MULTI_GPU", "num_processes": 8, "gpu_ids": "all"}
    assert "islands_spanned" not in by_rule(run_rules(cfg, ctx("h200-nvl-8")))


def test_fsdp_over_pcie_only_machine():
    cfg = {"distributed_type": "FSDP", "num_processes": 4, "gpu_ids": "0,1,2,3", "fsdp_config": FSDP2}
    [f] = by_rule(run_rules(cfg, ctx("pcie-l40s-8")))["sharding_over_pcie"]
    assert "PCIe only" in f.problem
    ds = {
        "distributed_type": "DEEPSPEED",
        "num_processes": 4,
        "gpu_ids": "0,1,2,3",
        "deepspeed_config": {"zero_stage": 3},
    }
    assert "sharding_over_pcie" in by_rule(run_rules(ds, ctx("pcie-l40s-8")))
    ddp = {"distributed_type": "MULTI_GPU", "num_processes": 4, "gpu_ids": "0,1,2,3"}
    assert "sharding_over_pcie" not in by_rule(run_rules(ddp, ctx("pcie-l40s-8")))
    assert "sharding_over_pcie" not in by_rule(run_rules(cfg, ctx("hgx-h200-8")))


def test_hsdp_groups_that_straddle_islands_are_reordered():
    cfg = {
        "distributed_type": "FSDP",
        "num_processes": 8,
        "gpu_ids": "0,4,1,5,2,6,3,7",
        "fsdp_config": FSDP2,
        "parallelism_config": {"parallelism_config_dp_replicate_size": 2, "parallelism_config_dp_shard_size": 4},
    }
    [f] = by_rule(run_rules(cfg, ctx("h200-nvl-8")))["hsdp_groups"]
    fixed, _ = fix_config(cfg, ctx("h200-nvl-8"))
    assert fixed["gpu_ids"] == "0,1,2,3,4,5,6,7"
    assert "hsdp_groups" not in by_rule(run_rules(fixed, ctx("h200-nvl-8")))
    assert f.severity == "warning"


def test_gpu_ids_this_machine_lacks_and_all_with_fewer_processes():
    assert "gpu_ids_on_machine" in by_rule(
        run_rules({"distributed_type": "MULTI_GPU", "num_processes": 2, "gpu_ids": "2,3"}, ctx("h200-sxm-2"))
    )
    [f] = by_rule(run_rules({"distributed_type": "MULTI_GPU", "num_processes": 4}, ctx("hgx-h200-8")))[
        "gpu_ids_on_machine"
    ]
    assert f.severity == "warning" and "fastest-first" in f.problem


@pytest.mark.parametrize(
    ("cfg", "fits"),
    [
        ({"distributed_type": "MULTI_GPU", "num_processes": 2}, False),
        ({"distributed_type": "FSDP", "num_processes": 2, "fsdp_config": FSDP2}, True),
    ],
)
def test_memory_fit_uses_the_estimator(cfg, fits):
    [f] = by_rule(run_rules(cfg, ctx("h200-sxm-2", "mistral-7b")))["memory_fit"]
    assert (f.severity == "info") is fits
    assert " GB " in f.problem
    if not fits:
        assert "fsdp" in f.fix or "zero" in f.fix


def test_all_with_fewer_processes_is_pinned_to_the_best_island_and_honours_exclude():
    cfg = {"distributed_type": "MULTI_GPU", "num_processes": 4}
    fixed, _ = fix_config(cfg, ctx("h200-nvl-8"))
    assert fixed["gpu_ids"] in ("0,1,2,3", "4,5,6,7")
    excluded = CheckContext(topo=load_topology(machine="h200-nvl-8"), exclude=(0,))
    fixed, _ = fix_config(cfg, excluded)
    assert fixed["gpu_ids"] == "4,5,6,7"
    spanning = {"distributed_type": "MULTI_GPU", "num_processes": 4, "gpu_ids": "0,1,4,5"}
    fixed, _ = fix_config(spanning, excluded)
    assert fixed["gpu_ids"] == "4,5,6,7"
    too_many = CheckContext(topo=load_topology(machine="h200-nvl-8"), exclude=(0, 1, 4, 5, 6))
    assert "islands_spanned" not in by_rule(run_rules(spanning, too_many))


def test_sharding_across_two_islands_suggests_island_sized_hsdp():
    cfg = {"distributed_type": "FSDP", "num_processes": 8, "fsdp_config": FSDP2}
    [f] = by_rule(run_rules(cfg, ctx("h200-nvl-8")))["sharding_over_pcie"]
    assert "dp_shard_size 4" in f.fix and "dp_replicate_size 2" in f.fix


def test_fsdp1_hybrid_with_fewer_processes_than_visible_gpus():
    cfg = {
        "distributed_type": "FSDP",
        "num_processes": 4,
        "fsdp_config": {
            "fsdp_version": 1,
            "fsdp_sharding_strategy": "HYBRID_SHARD",
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        },
    }
    assert "fsdp1_hybrid_visible" in by_rule(run_rules(cfg, ctx("hgx-h200-8")))
    assert "fsdp1_hybrid_visible" not in by_rule(run_rules({**cfg, "gpu_ids": "0,1,2,3"}, ctx("hgx-h200-8")))
