"""Multi-node planning: the flags reach the files, HSDP across nodes is the estimator's choice (not a rule) where the
link between nodes is slow, and `check` tells a private rendezvous address from a public one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from generator.cli import main as generator_main
from generator.model import load_model
from generator.plan.planner import make_plan
from generator.plan.types import PlanRequest
from generator.topology import load_topology

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "multinode-hgx-h200-8x2-hsdp" / "config.yaml"


def two_hgx(**kw):
    request = PlanRequest(global_batch=64, num_machines=2, main_process_ip="10.0.0.1", **kw)
    return make_plan(load_topology(machine="hgx-h200-8"), load_model("mistral-7b"), request)


@pytest.mark.parametrize("fabric", ["ib-ndr", "ib-hdr", "roce-100g", "eth-25g"])
def test_hsdp_is_the_fastest_fitting_strategy_when_nodes_are_slower_than_nvlink(fabric):
    plan = two_hgx(fabric=fabric)
    assert plan.strategy == "hsdp" and (plan.hsdp_replicate, plan.hsdp_shard) == (2, 8)
    fitting = {e.strategy: e.step_s for e in plan.estimates if e.fits}
    assert fitting["hsdp"] == min(fitting.values())
    assert fitting["hsdp"] < 0.8 * fitting["fsdp"]  # sharding across nodes pays the slow link on every layer


def test_with_nvlink_speed_between_nodes_the_estimator_may_prefer_a_flat_strategy():
    plan = two_hgx(fabric="ib-ndr-x8")
    hsdp = next(e for e in plan.estimates if e.strategy == "hsdp")
    assert plan.estimate.step_s <= hsdp.step_s
    assert plan.strategy != "hsdp"  # what the recipe README's fabric table reports


def test_multinode_flags_reach_yaml_command_and_slurm_script(tmp_path, capsys):
    out = tmp_path / "m.yaml"
    argv = ["plan", "--model", "mistral-7b", "--machine", "hgx-h200-8", "--num-machines", "2", "--machine-rank", "1"]
    argv += ["--main-process-ip", "10.1.2.3", "--main-process-port", "29611", "--inter-node-gbps", "12.5"]
    assert generator_main([*argv, "--output", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    cfg = yaml.safe_load(out.read_text())
    assert (cfg["num_machines"], cfg["num_processes"], cfg["machine_rank"]) == (2, 16, 1)
    assert (cfg["main_process_ip"], cfg["main_process_port"]) == ("10.1.2.3", 29611)
    assert (
        "--machine_rank 1" in data["launch_command"]
        and "--rdzv_backend static --same_network" in data["launch_command"]
    )
    assert any("12.5 GB/s between machines (from --inter-node-gbps)" in r for r in data["reasons"])
    assert (tmp_path / "m.slurm.sh").is_file()


def check(config: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "generator", "check", str(config), "--machine", "hgx-h200-8"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode in (0, 1, 2), proc.stderr
    return proc.stdout + proc.stderr


def test_check_accepts_the_recipes_private_address_and_warns_on_a_public_one(tmp_path):
    assert "public address" not in check(RECIPE)
    public = tmp_path / "public.yaml"
    public.write_text(RECIPE.read_text().replace("main_process_ip: 10.0.0.1", "main_process_ip: 8.8.8.8"))
    assert "8.8.8.8 is a public address" in check(public)
