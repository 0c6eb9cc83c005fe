"""Issue 21's two-GPU harness on CPU: slow-wire cells, their probes in calibration, the overlap fit, the Liger
checker and the preemption script. Every probe file and step time here is made up inside the test (labelled
synthetic); none is a measurement."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import check_liger, fit_overlap, wires
from bench import run_matrix as rm
from bench.calibration import measured_busbw, predict
from bench.harness import SAFE_ENV
from bench.results_rows import load_rows

ROOT = Path(__file__).resolve().parents[1]


def _cell(key: str) -> dict:
    return next(c for c in rm.all_cells([2]) if c["key"] == key)


def test_wire_cells_are_listed_keyed_and_launched_under_their_wire():
    keys = subprocess.run([sys.executable, "bench/run_matrix.py", "--list"], cwd=ROOT, capture_output=True, text=True)
    listed = set(keys.stdout.split())
    for wire in wires.SLOW_WIRES:
        for s in wires.WIRE_STRATEGIES:
            for seq, mb in wires.WIRE_WORKLOADS:
                assert f"g2-{s}-full-s{seq}-mb{mb}-ckpton-{wire}" in listed
    plain, host, sock = (_cell(f"g2-zero2-full-s1024-mb4-ckpton{w}") for w in ("", "-p2poff", "-sockets"))
    assert [wires.wire_of(c) for c in (plain, host, sock)] == ["nvlink", "p2poff", "sockets"]
    envs = [wires.cell_env(c, {"NCCL_P2P_DISABLE": "0"}) for c in (plain, host, sock)]
    assert all(SAFE_ENV.items() <= e.items() for e in envs)  # multicast stays off on every wire
    assert envs[0]["NCCL_P2P_DISABLE"] == "0" and "NCCL_SHM_DISABLE" not in envs[0]
    assert envs[1]["NCCL_P2P_DISABLE"] == "1" and "NCCL_SHM_DISABLE" not in envs[1]
    assert envs[2]["NCCL_P2P_DISABLE"] == "1" and envs[2]["NCCL_SHM_DISABLE"] == "1"
    assert rm.cell_steps(sock, 20) == 10 and rm.cell_steps(plain, 20) == 20


def test_slow_wire_cell_is_planned_with_its_probe_and_refused_without(tmp_path):
    cell = _cell("g2-ddp-full-s4096-mb1-ckpton-sockets")
    with pytest.raises(RuntimeError, match="no probe of the sockets wire"):
        wires.wire_plan_flags(cell, tmp_path)
    probe = wires.probe_file(tmp_path, "sockets")
    probe.write_text(json.dumps({"subsets": {"0,1": 3.0}}))  # synthetic
    assert wires.wire_plan_flags(cell, tmp_path) == ["--bandwidth-file", str(probe)]
    assert wires.wire_plan_flags(_cell("g2-ddp-full-s4096-mb1-ckpton"), tmp_path) == []
    plan = rm.plan_cell(cell, tmp_path / f"{cell['key']}.yaml", ["--machine", "h200-sxm-2"])
    at_nvlink = rm.plan_cell(_cell("g2-ddp-full-s4096-mb1-ckpton"), tmp_path / "nv.yaml", ["--machine", "h200-sxm-2"])
    comm = [next(e for e in p["estimates"] if e["strategy"] == "ddp")["comm_s"] for p in (plan, at_nvlink)]
    assert comm[0] > 50 * comm[1]  # 3 GB/s against the machine's NVLink


def _synthetic_files(step_s: float) -> dict[str, dict]:
    """A made-up matrix with one DDP cell per wire and made-up probes (synthetic, not measurements)."""
    cells = {}
    for suffix in ("", "-p2poff", "-sockets"):
        key = f"g2-ddp-full-s4096-mb1-ckpton{suffix}"
        cells[key] = dict(
            _cell(key), status="ok", command="train.py", config={"gradient_accumulation_steps": 1},
            measured={"peak_allocated_gb": 80.0, "peak_reserved_gb": 90.0, "tokens_per_s_per_gpu": 4096 / step_s},
        )  # fmt: skip
    return {
        "synthetic-matrix.json": {"machine": "synthetic", "cells": cells},
        "synthetic-probe.json": {"subsets": {"0,1": 300.0}, "p2p_disabled": {"0,1": 25.0}},
        "synthetic-probe-sockets.json": {"subsets": {"0,1": 3.0}, "wire": {"name": "sockets"}},
    }


def test_calibration_predicts_each_wire_at_its_probed_busbw():
    files = _synthetic_files(1.0)
    by_wire = wires.busbw_by_wire(files)
    assert by_wire == {"nvlink": {2: 300.0}, "p2poff": {2: 25.0}, "sockets": {2: 3.0}}
    assert measured_busbw(files) == {2: 300.0}  # the sockets probe does not leak into NVLink's busbw
    rows = {r.wire: r for r in load_rows(files)}
    comm = {w: predict(r, measured_busbw(files), by_wire).comm_s for w, r in rows.items()}
    assert comm["nvlink"] * 300 == pytest.approx(comm["p2poff"] * 25, rel=0.05)
    assert comm["p2poff"] * 25 == pytest.approx(comm["sockets"] * 3, rel=0.05)
    with pytest.raises(ValueError, match="no sockets probe"):
        predict(rows["sockets"], measured_busbw(files))
    assert rows["nvlink"].role == rows["p2poff"].role == "fit"


def test_seq4096_sockets_rows_are_held_out():
    rows = load_rows(_synthetic_files(1.0))
    assert {r.key: r.role for r in rows}["g2-ddp-full-s4096-mb1-ckpton-sockets"] == "validation"


def test_overlap_fit_recovers_known_overlaps_from_synthetic_rows():
    truth = {"ddp": 0.3, "deepspeed": 0.6, "fsdp": 0.85}
    rows = []
    for family, o in truth.items():
        for i, (rest, comm) in enumerate([(0.6, 0.05), (0.7, 0.6), (0.6, 7.0), (0.8, 9.5)]):
            noise = 1 + 0.002 * (-1) ** i
            role = "validation" if i == 3 else "fit"
            rows.append(fit_overlap.StepRow(f"{family}{i}", family, rest, comm, (rest + (1 - o) * comm) * noise, role))
    fits = fit_overlap.fit(rows)
    for family, o in truth.items():
        assert fits[family].overlap == pytest.approx(o, abs=0.01)
        assert f"{family}3" not in fits[family].fit_keys
    held = [r for r in rows if r.role == "validation"]
    assert all(abs(fit_overlap.error_pct(r, fits[r.family].overlap)) < 1 for r in held)
    assert "held out ddp3" in fit_overlap.report(rows, fits)


def test_liger_checker_flags_a_grad_norm_that_parts_ways():
    plain = {"losses": [11.0, 10.5, 10.0], "grad_norms": [5.0, 4.0, 3.0]}
    same = {"losses": [11.01, 10.49, 10.02], "grad_norms": [5.1, 3.9, 3.05]}
    wrong = {"losses": [11.0, 10.5, 10.0], "grad_norms": [5.0, 2.0, 3.0]}  # synthetic
    assert check_liger.disagreements(plain, same) == []
    assert check_liger.disagreements(plain, wrong) == ["step 2: grad norm 2.0 vs 4.0"]
    cells = {
        "g2-fsdp-full-s4096-mb1-ckptoff": {"status": "ok", "measured": plain},
        "g2-fsdp-full-s4096-mb1-ckptoff-liger": {"status": "ok", "measured": same},
        "g2-fsdp-full-s4096-mb1-ckptoff-liger-flex": {"status": "ok", "measured": same},
    }
    assert check_liger.pairs(cells) == [("g2-fsdp-full-s4096-mb1-ckptoff", "g2-fsdp-full-s4096-mb1-ckptoff-liger")]


def test_committed_liger_pairs_agree():
    """Runs on the committed matrices once a run with grad norms exists (none before issue 21's run 3)."""
    for path in sorted((ROOT / "bench" / "results").glob("h200-x2-*.json")):
        cells = json.loads(path.read_text()).get("cells", {})
        for plain, liger in check_liger.pairs(cells):
            assert not check_liger.disagreements(cells[plain]["measured"], cells[liger]["measured"]), (path, liger)


@pytest.mark.slow
def test_preemption_script_cpu_mode_resumes_to_the_same_losses(tmp_path):
    """The harness's SIGTERM row: two DDP ranks over gloo stopped together mid-run, a checkpoint, exit 75, --resume to
    the same losses (the only two-rank SIGTERM run in the suite). Its kill-during-save row is the harness around
    train.py's slow-save hook, which tests/test_train_launch.py runs on train.py itself; both rows together took
    121 s of a 2-core CI machine."""
    res = subprocess.run(
        [sys.executable, "bench/preempt.py", "--cpu", "--steps", "6", "--only", "cpu-ddp", "--workdir", str(tmp_path),
         "--output", str(tmp_path / "r.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=480,  # ~40 s alone; far longer under a loaded CPU
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-1000:]  # stdout: each row's verdict and error
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    assert set(rows) == {"cpu-ddp"}
    r = rows["cpu-ddp"]
    assert r["passed"] and r["interrupted_exit"] != 0 and r["resumed_exit"] == 0 and not r["disagree_steps"]
    assert len(r["resumed_losses"]) == 6 and r["resumed_losses"] == pytest.approx(r["base_losses"], abs=1e-5)
    assert r["preempted"]["exit_code"] == 75  # train.py checkpointed and said 75 (the launcher reports 1)
