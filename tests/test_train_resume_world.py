"""A preempted job requeued onto another number of processes, or after the plan changed strategy (issue 19 item 15):
DDP's whole-copy state continues on any world size (the launch test resumes 2 -> 1 and 1 -> 2 processes); a sharded
strategy's state, or another strategy's, is refused in one line naming what wrote it."""

from __future__ import annotations

import json

import pytest

from generator.errors import UserError
from training.args import parse_args
from training.checkpoints import STATE_FILE, check_resume_layout, publish_checkpoint, resume_step


def checkpoint(out, step=4, **state):
    tmp = out / f".tmp-step-{step:08d}"
    tmp.mkdir(parents=True)
    args = parse_args(["--output-dir", str(out), "--max-steps", "10"])
    keys = {k: getattr(args, k) for k in ("global_batch", "seq_len", "seed", "method", "dataset", "pack")}
    publish_checkpoint(tmp, out / f"step-{step:08d}", {"step": step, **keys, **state}, keep_last=0)
    return parse_args(["--output-dir", str(out), "--max-steps", "10", "--resume"])


@pytest.mark.parametrize(
    "strategy, saved_world, world", [("fsdp", 2, 4), ("zero3", 4, 2), ("zero2", 2, 1), ("hsdp", 8, 4)]
)
def test_a_sharded_checkpoint_on_another_world_size_is_refused_naming_what_wrote_it(
    tmp_path, strategy, saved_world, world
):
    args = checkpoint(tmp_path, world_size=saved_world, strategy=strategy)
    with pytest.raises(UserError) as err:
        resume_step(args, tmp_path, world, strategy)
    msg = str(err.value)
    assert f"written by {strategy} on {saved_world} process(es)" in msg and f"this run has {world}" in msg
    assert "cannot be mapped" in msg and "\n" not in msg
    assert resume_step(args, tmp_path, saved_world, strategy)[1] == 4  # the same layout resumes


def test_a_checkpoint_from_another_strategy_is_refused_even_on_the_same_world_size(tmp_path):
    args = checkpoint(tmp_path, world_size=2, strategy="ddp")
    with pytest.raises(UserError, match=r"written by ddp on 2 process\(es\); this run is fsdp, which stores"):
        resume_step(args, tmp_path, 2, "fsdp")


@pytest.mark.parametrize("saved_world, world", [(2, 1), (1, 2), (4, 8)])
def test_a_ddp_checkpoint_continues_on_another_world_size_and_says_so(tmp_path, saved_world, world):
    args = checkpoint(tmp_path, world_size=saved_world, strategy="ddp", samples_consumed=32)
    path, step, note = resume_step(args, tmp_path, world, "ddp")
    assert step == 4 and path.name == "step-00000004"
    assert f"written on {saved_world} process(es) on {world}" in note and "32 samples" in note
    assert resume_step(args, tmp_path, saved_world, "ddp")[2] is None


def test_an_old_checkpoint_without_its_strategy_resumes_only_on_its_world_size(tmp_path):
    state = {"world_size": 2}
    assert check_resume_layout(state, 2, "fsdp", tmp_path) is None
    with pytest.raises(UserError, match=r"does not record its strategy .* this run has 1; resume it .* on 2 process"):
        check_resume_layout(state, 1, "ddp", tmp_path)


def test_the_saved_state_records_the_strategy(tmp_path):
    from types import SimpleNamespace

    from training.checkpoints import save_checkpoint

    class Acc:
        is_main_process = True

        def wait_for_everyone(self):
            pass

        def save_state(self, path):
            (tmp_path / path).mkdir(parents=True, exist_ok=True)

    args = SimpleNamespace(global_batch=8, seq_len=64, seed=0, method="full", dataset="d", pack=True, keep_last=0)
    log = SimpleNamespace(write=lambda **kw: None)
    save_checkpoint(Acc(), tmp_path, 2, args, 2, 1, log, "zero2")
    state = json.loads((tmp_path / "step-00000002" / STATE_FILE).read_text())
    assert (state["world_size"], state["strategy"], state["samples_consumed"]) == (2, "zero2", 16)
