"""The GPU benchmark harness, exercised on CPU up to the point where it would launch training: every cell gets a
config from the generator that accelerate loads, and a train.py command that train.py's own parser accepts. GPU time
is scarce; a typo here would waste a whole device call."""

from __future__ import annotations

import importlib.util
import json
import shlex
from pathlib import Path

import pytest
from accelerate.commands.config.config_args import load_config_from_file

from bench import run_matrix as rm

ROOT = Path(__file__).resolve().parents[1]


def _train_module():
    spec = importlib.util.spec_from_file_location("train_script", ROOT / "train.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cells_are_unique_and_one_gpu_skips_redundant_shardings():
    cells = rm.all_cells([1, 2])
    keys = [c["key"] for c in cells]
    assert len(keys) == len(set(keys))
    one = {c["strategy"] for c in cells if c["gpus"] == 1}
    assert one == {"ddp", "fsdp", "zero2"}
    two = {(c["strategy"], c["method"]) for c in cells if c["gpus"] == 2}
    assert two == set(rm.STRATEGIES)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "fsdp_grad_op", "zero1", "zero2", "zero3"])
def test_every_two_gpu_cell_plans_a_loadable_config_and_a_parsable_train_command(tmp_path, strategy):
    cell = next(c for c in rm.all_cells([2]) if c["strategy"] == strategy and c["seq_len"] == 4096 and c["ckpt"])
    cfg = tmp_path / "cell.yaml"
    plan = rm.plan_cell(cell, cfg, ["--machine", "h200-sxm-2"])
    assert plan["strategy"] == strategy and plan["num_processes"] == 2
    load_config_from_file(str(cfg))
    cmd = rm.train_command(cell, plan, cfg, tmp_path / "log.jsonl", tmp_path / "m", tmp_path / "out", 20, [])
    args = _train_module().parse_args(cmd[cmd.index("train.py") + 1 :])
    assert args.max_steps == 20 and args.init == "random" and args.export is None
    assert args.global_batch == plan["micro_batch"] * plan["num_processes"] * plan["gradient_accumulation_steps"]
    assert shlex.split(shlex.join(cmd)) == cmd


def test_summary_of_a_real_train_log(tmp_path):
    # The per-step log of the FSDP2 smoke run on 2x H200 (bench/results), as train.py wrote it.
    smoke = json.loads((ROOT / "bench/results/h200-x2-train-smoke-2026-11-30.json").read_text())
    log = tmp_path / "fsdp.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in smoke["runs"]["fsdp"]["log"]))
    s = rm.summarise_log(log)
    assert s["steps"] == 8 and len(s["losses"]) == 8
    assert 0.6 < s["step_s"] < 0.8 and 5000 < s["tokens_per_s_per_gpu"] < 6500
    assert s["peak_allocated_gb"] == pytest.approx(89.011) and s["allocated_per_rank_gb"] == [89.011, 89.011]
