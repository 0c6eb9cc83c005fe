"""bench/sweep.py's GPU count per cell (issue 21, run 5: the scripts people launch on two GPUs) and the scripts'
DeepSpeed plumbing, on CPU. Nothing here is a measurement: the results files below are made up inside the tests
(labelled synthetic)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench import sweep, sweep_grid
from bench.calibration import predict
from bench.results_rows import load_files, load_rows
from bench.scripts import common, plain_loop, steplog
from bench.scripts.common import ScriptError

ROOT = Path(__file__).resolve().parents[1]
TWO_GPU = [c for c in sweep_grid.CELLS if c.gpus == 2]


def _listed(only: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "bench/sweep.py", "--list", "--only", only], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_two_gpu_cells_are_listed_after_the_single_gpu_ones():
    for script in ("custom", "trainer", "train.py"):
        keys = _listed(f"{script}-g2-*")
        assert keys == [
            f"{script}-g2-ddp-full-s4096-mb1-ckpton-sdpa-short",
            f"{script}-g2-fsdp-full-s4096-mb1-ckpton-sdpa-short",
            f"{script}-g2-zero2-full-s4096-mb1-ckpton-sdpa-short",
            f"{script}-g2-zero3-full-s4096-mb1-ckpton-sdpa-short",
            f"{script}-g2-ddp-lora-s4096-mb1-ckptoff-sdpa-short",
            f"{script}-g2-ddp-lora-s4096-mb1-ckpton-sdpa-short",
        ]
    every = _listed("*")
    first_two = every.index(TWO_GPU[0].key)
    assert all("-g1-" in k for k in every[:first_two]) and all("-g2-" in k for k in every[first_two:])
    assert _listed("*-g2-*") == every[first_two:]  # what ONLY='*-g2-*' bash bench/gpu_sweep.sh runs
    # the single-GPU keys the committed results files are keyed by are unchanged
    for name in ("h200-x1-sweep-2026-12-01", "h200-x1-fp8-2026-12-01", "h200-x1-fp8-2026-12-01-rerun"):
        committed = json.loads((ROOT / f"bench/results/{name}.json").read_text())["cells"]
        assert set(committed) <= set(every), name


def _flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_plan_command_asks_for_the_cells_gpus_and_global_batch(tmp_path):
    cell = next(c for c in TWO_GPU if c.key == "custom-g2-zero3-full-s4096-mb1-ckpton-sdpa-short")
    cmd = sweep.plan_command(cell, tmp_path / "z3.yaml")
    assert _flag(cmd, "--num-gpus") == "2" and _flag(cmd, "--global-batch") == "2"
    one = sweep.plan_command(sweep_grid.CELLS[0], tmp_path / "g1.yaml")
    assert _flag(one, "--num-gpus") == "1" and _flag(one, "--global-batch") == _flag(one, "--micro-batch")
    # the plan it asks for (on the reference 2x H200 machine): two processes, no accumulation
    res = subprocess.run([*cmd, "--machine", "h200-sxm-2"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert (plan["strategy"], plan["num_processes"], plan["gradient_accumulation_steps"]) == ("zero3", 2, 1)
    assert "num_processes: 2" in (tmp_path / "z3.yaml").read_text()


@pytest.mark.parametrize("cell", [sweep_grid.CELLS[0], *TWO_GPU[:1]], ids=lambda c: c.key)
def test_train_command_global_batch_is_micro_batch_times_gpus(cell, tmp_path):
    cmd = sweep.train_command(cell, tmp_path / "c.yaml", tmp_path / "log.jsonl", tmp_path, sweep.SHORT_DATA, tmp_path)
    assert int(_flag(cmd, "--global-batch")) == cell.micro_batch * cell.gpus
    script_args = cmd[cmd.index(sweep.SCRIPTS[cell.script][0]) + 1 :]
    if cell.script == "custom":  # the script itself turns it into no accumulation at the cell's world size
        assert common.grad_accum_steps(plain_loop.parse_args(script_args), cell.gpus) == 1


def _sweep_cell(gpus: int | None, tps: float) -> dict:
    cell = dict(
        script="custom", strategy="ddp", method="full", seq_len=4096, micro_batch=1, ckpt=True, attention="sdpa",
        docs="short", liger=False, steps=6, doc_tokens=54, status="ok", command="plain_loop.py",
        measured={"peak_allocated_gb": 80.0, "peak_reserved_gb": 90.0, "tokens_per_s_per_gpu": tps},
    )  # fmt: skip
    return cell if gpus is None else dict(cell, gpus=gpus)


def test_calibration_reads_the_cells_gpus_and_predicts_two_gpus_at_their_busbw():
    files = {  # synthetic: one cell as the committed single-GPU file writes it (no gpus field), one two-GPU cell
        "synthetic-sweep.json": {
            "machine": "synthetic",
            "cells": {
                "custom-g1-ddp-full-s4096-mb1-ckpton-sdpa-short": _sweep_cell(None, 5000.0),
                "custom-g2-ddp-full-s4096-mb1-ckpton-sdpa-short": _sweep_cell(2, 4800.0),
            },
        }
    }
    rows = {r.key: r for r in load_rows(files)}
    one, two = (
        rows["custom-g1-ddp-full-s4096-mb1-ckpton-sdpa-short"],
        rows["custom-g2-ddp-full-s4096-mb1-ckpton-sdpa-short"],
    )
    assert (one.gpus, two.gpus) == (1, 2) and two.role == "validation" and two.script == "custom"
    assert predict(one, {2: 300.0}).comm_s == 0  # one GPU: no wire
    fast, slow = (predict(two, {2: bw}).comm_s for bw in (300.0, 30.0))
    assert fast > 0 and slow == pytest.approx(10 * fast, rel=0.05)
    assert all(r.gpus == 1 for r in load_rows(load_files()) if r.source.startswith("h200-x1-sweep"))


def _run_script(script: str, env: dict[str, str], *flags: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, script, "--micro-batch", "1", *flags]
    base = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_")}
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, env={**base, **env})


@pytest.mark.parametrize("script", ["bench/scripts/plain_loop.py", "bench/scripts/trl_sft.py"])
def test_deepspeed_accumulation_mismatch_is_one_line_and_exit_2(script):
    # What `accelerate launch` exports for a generator config's deepspeed_config (accelerate/utils/launch.py).
    env = {"WORLD_SIZE": "2", "ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "1"}
    proc = _run_script(script, env, "--global-batch", "8")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().count("\n") == 0
    assert "gradient_accumulation_steps=1 but the flags give 4" in proc.stderr


def _args(**kw) -> SimpleNamespace:
    return SimpleNamespace(**{"global_batch": 4, "micro_batch": 1, "max_grad_norm": 1.0, **kw})


def test_deepspeed_launch_check_reads_the_exported_values_and_the_config_file(monkeypatch, tmp_path):
    for k in [k for k in os.environ if k.startswith("ACCELERATE_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "1")
    common.check_deepspeed_launch(_args(), 4)  # not a DeepSpeed launch: nothing to agree with
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    common.check_deepspeed_launch(_args(), 1)
    monkeypatch.setenv("ACCELERATE_GRADIENT_CLIPPING", "1.0")
    with pytest.raises(ScriptError, match="gradient_clipping=1.0 but --max-grad-norm is 0.5"):
        common.check_deepspeed_launch(_args(max_grad_norm=0.5), 1)
    monkeypatch.delenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS")
    monkeypatch.delenv("ACCELERATE_GRADIENT_CLIPPING")
    ds = tmp_path / "ds.json"  # a deepspeed_config_file: "auto" is the library's to fill, a number must agree
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", str(ds))
    ds.write_text(json.dumps({"gradient_accumulation_steps": "auto", "gradient_clipping": "auto"}))
    common.check_deepspeed_launch(_args(max_grad_norm=0.3), 8)
    ds.write_text(json.dumps({"gradient_accumulation_steps": 2}))
    common.check_deepspeed_launch(_args(), 2)
    with pytest.raises(ScriptError, match="gradient_accumulation_steps=2 but the flags give 8"):
        common.check_deepspeed_launch(_args(), 8)


def test_auto_clipping_takes_max_grad_norm():
    def accel(clip):
        plugin = SimpleNamespace(deepspeed_config={"gradient_clipping": clip})
        return SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=plugin))

    auto, fixed = accel("auto"), accel(1.0)
    for a in (auto, fixed):
        common.fill_deepspeed_clipping(a, 0.3)
    assert auto.state.deepspeed_plugin.deepspeed_config["gradient_clipping"] == 0.3
    assert fixed.state.deepspeed_plugin.deepspeed_config["gradient_clipping"] == 1.0
    common.fill_deepspeed_clipping(SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=None)), 0.3)  # DDP / FSDP


def test_optimizer_settings_reach_the_torch_optimizer_under_deepspeeds_wrappers():
    import torch

    adamw = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(3))], lr=1e-3, weight_decay=0.0)
    # Accelerate's DeepSpeed wrapper -> DeepSpeed's ZeRO optimizer (no `defaults`) -> the torch optimizer
    zero = SimpleNamespace(optimizer=adamw)
    wrapped = SimpleNamespace(optimizer=zero)
    got = steplog.optimizer_settings(wrapped)
    assert got["optimizer"] == "torch.optim.adamw.AdamW" and got["weight_decay"] == [0.0]
    assert got == steplog.optimizer_settings(SimpleNamespace(optimizer=adamw))  # Accelerate's plain wrapper


def test_a_file_with_its_machines_host_rows_prices_its_rows_with_them():
    """A host-bound cell (LoRA at 2,048 x 1) measured beside `probe --compute` host rows of its machine: a slower host
    there means a slower prediction for that file's rows, and only theirs."""
    cell = dict(_sweep_cell(None, 8000.0), script="train.py", method="lora", seq_len=2048, ckpt=False, liger=True)
    key = "train.py-g1-ddp-lora-s2048-mb1-ckptoff-sdpa-short-liger"
    slow = [{"variant": "lora", "compiled": False, "liger": True, "fwd_ms_per_layer": 4.0,
             "fwdbwd_ms_per_layer": 12.0, "step_ms": 20.0}]  # fmt: skip
    files = {"plain.json": {"machine": "a", "cells": {key: cell}},
             "probed.json": {"machine": "b", "cells": {key: cell}, "host": slow + slow}}  # fmt: skip
    rows = {r.source: r for r in load_rows(files)}
    assert rows["plain.json"].host == () and len(rows["probed.json"].host) == 2
    shipped, probed = predict(rows["plain.json"], {}), predict(rows["probed.json"], {})
    assert probed.step_s > shipped.step_s
    assert probed.step_s >= 32 * 12e-3 + 20e-3  # at least that host's time per step


def test_host_from_puts_the_probes_host_rows_in_the_results_before_any_cell(tmp_path, monkeypatch):
    """`--host-from` copies a probe file's host rows (its own-model rows too) into the results, named by file, and
    refuses a probe with none, in one line."""
    probe = tmp_path / "compute-q3.json"
    rows = [{"variant": "lora", "compiled": False, "fwd_ms_per_layer": 1.0, "fwdbwd_ms_per_layer": 3.0},
            {"variant": "lora", "compiled": False, "fwd_ms_per_layer": 2.0, "fwdbwd_ms_per_layer": 6.0,
             "model": "q3", "model_type": "qwen3_moe", "experts": 128, "top_k": 8}]  # fmt: skip
    probe.write_text(json.dumps({"kind": "compute", "host": rows}))
    monkeypatch.setattr(sweep, "versions", lambda: {})  # nvidia-smi and the GPU's driver: not on this machine

    def run(out: Path) -> int:
        monkeypatch.setattr(sys, "argv", ["sweep.py", "--results", str(out), "--only", "no-such-cell", "--workdir",
                                          str(tmp_path / "w"), "--host-from", str(probe)])  # fmt: skip
        return sweep.main()

    assert run(tmp_path / "results.json") == 0
    written = json.loads((tmp_path / "results.json").read_text())["host"]
    assert written == [{**row, "source": "compute-q3.json"} for row in rows]
    assert run(tmp_path / "results.json") == 0  # a resumed call with the same probe: its rows once, not twice
    assert json.loads((tmp_path / "results.json").read_text())["host"] == written
    probe.write_text(json.dumps({"kind": "compute", "host": []}))
    with pytest.raises(SystemExit, match="no host rows"):
        run(tmp_path / "other.json")
    assert not (tmp_path / "other.json").exists()


def test_host_rows_script_writes_what_host_from_reads(tmp_path):
    """bench/scripts/host_rows.py (the full probe's host rows alone, for a call that re-prices its cells' host time) on
    the CPU: the probe's stand-in rows, eager LoRA and full, in a file `--host-from` takes and the estimator keys."""
    from bench.scripts import host_rows
    from generator.estimate.host_time import host_tables

    out = tmp_path / "host.json"
    host_rows.main(["--out", str(out)])
    rows = sweep.host_rows_of(out)
    assert {r["variant"] for r in rows} == {"lora", "full"} and all(r["fwdbwd_ms_per_layer"] > 0 for r in rows)
    host, _ = host_tables(rows)
    assert set(host) == {("lora", False, False), ("full", False, False)}
