"""bench/preempt.py's one-GPU rows without a GPU: the plan and train.py commands each row launches, the environment of
each run, the schedule, and the verdict on made-up logs (the CPU mode runs the same code for real:
tests/test_bench_twogpu.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import preempt
from bench.harness import SAFE_ENV

ROWS = {r.name: r for r in preempt.ONE_GPU_ROWS}


def flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_one_gpu_rows_cover_the_issue():
    kinds = {(r.strategy, r.method, r.kill_during_save) for r in preempt.ONE_GPU_ROWS}
    for want in [("ddp", "lora"), ("ddp", "qlora"), ("fsdp", "lora"), ("ddp", "full"), ("fsdp", "full")]:
        assert (*want, False) in kinds
    assert any(k[2] for k in kinds)


@pytest.mark.parametrize("name", sorted(ROWS))
def test_each_row_plans_one_gpu_with_its_strategy_and_method_in_bf16(name, tmp_path):
    row = ROWS[name]
    cmd = preempt.plan_command(row, "gpu1", tmp_path / "c.yaml")
    assert cmd[1:4] == ["-m", "generator", "plan"]
    assert flag(cmd, "--num-gpus") == "1" and flag(cmd, "--strategy") == row.strategy
    assert flag(cmd, "--method") == row.method and flag(cmd, "--output") == str(tmp_path / "c.yaml")
    assert flag(cmd, "--precision") == "bf16"  # auto could pick fp8, whose compile would eat the time budget
    train = preempt.train_command(row, tmp_path / "c.yaml", tmp_path / "m", preempt.workload("gpu1"), tmp_path, 12, "")
    for key in ("--seq-len", "--micro-batch", "--global-batch"):
        assert flag(cmd, key) == flag(train, key)  # the plan sized the run it configures


def test_train_commands_resume_only_the_resume_run_and_only_the_kill_row_saves_periodically(tmp_path):
    flags = preempt.workload("gpu1")
    for row in preempt.ONE_GPU_ROWS:
        cmds = {run: preempt.train_command(row, tmp_path / "c", tmp_path / "m", flags, tmp_path, 12, run)
                for run in ("base", "cut", "resume")}  # fmt: skip
        assert [("--resume" in c) for c in cmds.values()] == [False, False, True]
        assert all(flag(c, "--method") == row.method and flag(c, "--init") == "random" for c in cmds.values())
        assert flag(cmds["base"], "--save-every") == "0"
        periodic = {flag(cmds[r], "--save-every") != "0" for r in ("cut", "resume")}
        assert periodic == {row.kill_during_save}


def test_only_the_interrupted_run_is_slowed_and_only_the_kill_row_holds_a_save_open():
    for row in preempt.ONE_GPU_ROWS:
        base, cut, resume = (preempt.run_env(row, run, 12) for run in ("base", "cut", "resume"))
        assert all(e[k] == v for e in (base, cut, resume) for k, v in SAFE_ENV.items())
        assert "TRAIN_TEST_STEP_DELAY" in cut and "TRAIN_TEST_STEP_DELAY" not in base | resume
        held = cut.get("TRAIN_TEST_SLOW_SAVE")
        assert (held is not None) == row.kill_during_save and "TRAIN_TEST_SLOW_SAVE" not in base | resume
        if held:
            assert int(held.split(":")[0]) == 2 * preempt.save_every(12)


def test_full_fine_tunes_take_turns_and_the_rest_run_side_by_side():
    lanes = preempt.lanes(preempt.ONE_GPU_ROWS)
    full = [lane for lane in lanes if any(r.method == "full" for r in lane)]
    assert len(full) == 1 and {r.name for r in full[0]} == {"ddp-full", "fsdp-full"}
    assert sum(len(lane) for lane in lanes) == len(preempt.ONE_GPU_ROWS)
    assert all(len(lane) == 1 for lane in lanes if lane not in full)


def write_log(out: Path, records: list[dict]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "train_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


BASE = {s: 10.0 - 0.5 * s for s in range(1, 13)}


def cut_log(out: Path, resumed_from: str, moved: dict | None = None, preempted: bool = True) -> None:
    recs = [{"event": "start", "step": 0, "resumed_from": None}]
    recs += [{"step": s, "loss": BASE[s]} for s in range(1, 7)]
    if preempted:
        recs.append({"event": "preempted", "step": 6, "signal": 15, "exit_code": 75})
    recs.append({"event": "start", "step": 6, "resumed_from": str(out / resumed_from)})
    recs += [{"step": s, "loss": (moved or {}).get(s, BASE[s])} for s in range(7, 13)]
    write_log(out, recs)


def test_a_sigterm_row_passes_on_agreeing_losses_and_fails_on_a_moved_or_lost_step(tmp_path):
    row = ROWS["ddp-lora"]
    cut_log(tmp_path / "a", "step-00000006")
    assert preempt.verdict(row, BASE, tmp_path / "a", 1, "step-00000006", 0, 12)["passed"]
    cut_log(tmp_path / "b", "step-00000006", moved={9: BASE[9] + 0.5})
    bad = preempt.verdict(row, BASE, tmp_path / "b", 1, "step-00000006", 0, 12)
    assert not bad["passed"] and bad["disagree_steps"] == [9]
    cut_log(tmp_path / "c", "step-00000006", preempted=False)  # killed without the checkpoint train.py promises
    assert not preempt.verdict(row, BASE, tmp_path / "c", 1, "step-00000006", 0, 12)["passed"]
    cut_log(tmp_path / "d", "step-00000006")
    assert not preempt.verdict(row, BASE, tmp_path / "d", 0, "step-00000006", 0, 12)["passed"]  # it was not stopped
    assert not preempt.verdict(row, BASE, tmp_path / "d", 1, "step-00000006", 1, 12)["passed"]  # the resume failed


def test_the_kill_row_must_resume_from_the_checkpoint_before_the_killed_save(tmp_path):
    row = ROWS["ddp-lora-kill-during-save"]
    before = f"step-{preempt.save_every(12):08d}"
    killed = f"step-{2 * preempt.save_every(12):08d}"
    cut_log(tmp_path / "a", before, preempted=False)
    assert preempt.verdict(row, BASE, tmp_path / "a", 1, before, 0, 12)["passed"]
    # the killed save became `latest`, or the resume took it: a half-written checkpoint was trusted
    assert not preempt.verdict(row, BASE, tmp_path / "a", 1, killed, 0, 12)["passed"]
    cut_log(tmp_path / "b", killed, preempted=False)
    assert not preempt.verdict(row, BASE, tmp_path / "b", 1, before, 0, 12)["passed"]


def test_disagreements_use_the_parity_tolerance():
    absolute, relative = preempt.TOLERANCE
    base = {1: 10.0, 2: 10.0}
    inside, outside = absolute + relative * 10.0 - 1e-6, absolute + relative * 10.0 + 1e-6
    assert preempt.disagreements(base, {1: 10.0 + inside, 2: 10.0 - inside}) == []
    assert preempt.disagreements(base, {1: 10.0 + outside}) == [1, 2]  # moved, and lost


def test_unknown_rows_are_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as err:
        preempt.main(["--workdir", str(tmp_path), "--only", "ddp-lora,nope"])
    assert err.value.code == 2 and "--only nope: not a row here" in capsys.readouterr().err


def test_waits_are_cut_to_the_budget_left():
    import argparse
    import time

    assert preempt.left(argparse.Namespace(timeout=420.0, deadline=None)) == 420.0
    soon = preempt.left(argparse.Namespace(timeout=420.0, deadline=time.time() + 30))
    assert 25 < soon <= 30
    assert preempt.left(argparse.Namespace(timeout=420.0, deadline=time.time() - 5)) == 1.0  # spent: fail fast
