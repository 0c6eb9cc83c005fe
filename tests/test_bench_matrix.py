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
    log.write_text(log.read_text() + '{"step": 9, "loss": 2.1, "step_ti')  # a rank killed mid-line
    s = rm.summarise_log(log)
    assert s["steps"] == 8 and len(s["losses"]) == 8
    assert 0.6 < s["step_s"] < 0.8 and 5000 < s["tokens_per_s_per_gpu"] < 6500
    assert s["peak_allocated_gb"] == pytest.approx(89.011) and s["allocated_per_rank_gb"] == [89.011, 89.011]


def test_only_patterns_select_in_priority_order_without_repeats():
    cells = rm.all_cells([1, 2])
    got = [c["key"] for c in rm.select(cells, ["g2-zero3-full-s4096-*", "g2-fsdp-full-s4096-mb1-ckpton", "g2-zero3-*"])]
    assert got[:2] == ["g2-zero3-full-s4096-mb1-ckpton", "g2-zero3-full-s4096-mb1-ckptoff"]
    assert got[2] == "g2-fsdp-full-s4096-mb1-ckpton"  # exact key: the lever variants of it are not pulled in
    assert len(got) == len(set(got)) == 5  # then ZeRO-3 s1024: ckpt on, off (no slow-wire cell: none was named)


def test_slow_wire_cells_are_selected_only_by_a_pattern_naming_their_wire():
    cells = rm.all_cells([1, 2])
    assert not any("-p2poff" in c["key"] or "-sockets" in c["key"] for c in rm.select(cells, ["g2-*"]))
    got = {c["key"] for c in rm.select(cells, ["g2-zero3-*-p2poff"])}
    assert got == {"g2-zero3-full-s4096-mb1-ckpton-p2poff", "g2-zero3-full-s1024-mb4-ckpton-p2poff"}


@pytest.mark.parametrize(
    "key",
    [
        "g2-fsdp-full-s4096-mb2-ckptoff-liger",
        "g2-fsdp-full-s4096-mb2-ckptoff-liger-compile",
        "g2-fsdp-full-s4096-mb2-ckptoff-liger-flex",
    ],
)
def test_lever_cells_pass_liger_to_both_sides_and_compile_to_accelerate(tmp_path, key):
    from accelerate.commands.launch import launch_command_parser

    cell = next(c for c in rm.all_cells([2]) if c["key"] == key)
    cfg = tmp_path / "cell.yaml"
    plan = rm.plan_cell(cell, cfg, ["--machine", "h200-sxm-2"])
    assert plan["micro_batch"] == 2 and plan["grad_checkpointing"] is False
    cmd = rm.train_command(cell, plan, cfg, tmp_path / "log.jsonl", tmp_path / "m", tmp_path / "out", 20, [])
    launch = launch_command_parser().parse_args(cmd[3:])
    assert launch.training_script == "train.py"
    assert (launch.dynamo_backend == "inductor") == ("compile" in key)
    assert bool(launch.dynamo_use_regional_compilation) == ("compile" in key)
    args = _train_module().parse_args(launch.training_script_args)
    assert args.liger and args.micro_batch == 2 and not args.grad_checkpointing
    assert args.attn_implementation == ("flex_attention" if "flex" in key else "sdpa")


def test_a_cell_predicted_far_over_the_card_is_skipped_without_launching(tmp_path, monkeypatch):
    launched = []
    monkeypatch.setattr(rm.subprocess, "run", _only_plans(launched))
    cell = next(c for c in rm.all_cells([2]) if c["key"] == "g2-ddp-full-s4096-mb1-ckptoff")
    # bf16, as the matrix ran it (its rows predate float8): eager layers, 162 GB predicted
    row = rm.run_cell(cell, 20, tmp_path, ["--machine", "h200-sxm-2", "--precision", "bf16"], [])
    assert row["status"] == "skipped" and "x the GPU" in row["tail"] and launched == []
    assert row["predicted"]["peak_gb"] > 1.05 * 150


def test_one_gpu_cells_are_pinned_to_their_lane(tmp_path):
    cell = next(c for c in rm.all_cells([1]) if c["key"] == "g1-ddp-qlora-s4096-mb1-ckpton")
    plan = rm.plan_cell(cell, tmp_path / "c.yaml", ["--machine", "h200-sxm-2"], lane=1, n_gpus=2)
    assert plan["gpu_ids"] == [1] and plan["num_processes"] == 1
    cmd = rm.train_command(cell, plan, tmp_path / "c.yaml", tmp_path / "l", tmp_path / "w", tmp_path / "o", 20, [])
    args = _train_module().parse_args(cmd[cmd.index("train.py") + 1 :])
    # QLoRA from a random init: train.py quantises it in memory, so no weights are written to disk first.
    assert args.method == "qlora" and args.init == "random" and args.model == str(tmp_path / "w")


def _only_plans(launched: list):
    real = rm.subprocess.run

    def fake(cmd, *a, **kw):
        if "accelerate.commands.launch" in cmd:
            launched.append(cmd)
            raise AssertionError("launched a cell predicted not to fit")
        return real(cmd, *a, **kw)

    return fake


def test_runner_puts_one_gpu_cells_side_by_side_and_stops_at_the_budget(tmp_path, monkeypatch):
    import argparse
    import threading
    import time

    seen, active, peak = [], [0], [0]
    lock = threading.Lock()

    def fake_run_cell(cell, steps, workdir, extra_plan, extra_train, lane=None, n_gpus=0):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
            seen.append((cell["key"], lane))
        time.sleep(0.2)
        with lock:
            active[0] -= 1
        return dict(cell, status="ok", wall_s=0.2, measured={})

    cells = rm.select(rm.all_cells([1, 2]), ["g1-*-s4096-*", "g2-fsdp-full-s4096-mb1-ckpton"])
    args = argparse.Namespace(steps=1, workdir=tmp_path, extra_plan="", extra_train="", budget_s=60, cell_estimate_s=1)
    results = {"cells": {}}
    rm.Runner(args, results, [tmp_path / "r.json"], 2, time.time(), fake_run_cell, rm.report_line).run(cells)
    assert len(seen) == len(cells) and peak[0] == 2
    assert {lane for key, lane in seen if key.startswith("g1-")} == {0, 1}
    assert dict(seen)["g2-fsdp-full-s4096-mb1-ckpton"] is None
    assert json.loads((tmp_path / "r.json").read_text())["cells"].keys() == {c["key"] for c in cells}

    seen.clear()
    args.budget_s, args.cell_estimate_s = 0.5, 0.1  # then 0.2 s per measured cell: stops after a few
    rm.Runner(args, {"cells": {}}, [tmp_path / "r2.json"], 1, time.time(), fake_run_cell, rm.report_line).run(cells)
    assert 1 <= len(seen) < len(cells)


def test_bench_doc_tokens_is_the_default_datasets_mean_under_the_bench_tokenizer(tmp_path):
    """BENCH_DOC_TOKENS tells the estimator how much attention work flex skipped in the matrix's flex cells."""
    from tiny_model import build_tokenizer
    from transformers import AutoTokenizer

    train = _train_module()
    build_tokenizer(tmp_path)
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    args = train.parse_args([])
    ids, _, _ = train.tokenize_rows(train.load_rows(str(rm.REPO / args.dataset)), tok, 4096)
    assert train.mean_tokens(ids) == rm.BENCH_DOC_TOKENS
