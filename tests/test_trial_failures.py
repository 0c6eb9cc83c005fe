"""`plan --trial` that cannot succeed (issue 19 item 12): a model train.py cannot load is refused before any trial
runs; a trial whose child fails reports the child's own error line (not the launcher's CalledProcessError); a failed
trial leaves nothing in the calibration file."""

from __future__ import annotations

import sys
import textwrap

import pytest

from generator.cli import main
from generator.trial.runner import child_error

PLAN = ["plan", "--model", "mistral-7b", "--machine", "h200-sxm-2", "--num-gpus", "1", "--strategy", "ddp",
        "--attention", "sdpa", "--grad-checkpointing", "off", "--seq-len", "256", "--trial", "--top", "2"]  # fmt: skip
FAILING_LAUNCHER = textwrap.dedent(
    """
    # Stands in for `accelerate launch` around a train.py that stops with its own error: what accelerate prints then.
    import sys
    print("train.py: error: cannot load model 'x': not a local directory or in the Hugging Face cache", file=sys.stderr)
    print("Traceback (most recent call last):")
    print("  File \\"accelerate/commands/launch.py\\", line 1, in simple_launcher")
    print("subprocess.CalledProcessError: Command '['/usr/bin/python', 'train.py', '--model', 'mistralai/Mistral-7B-v0."
          "1', '--seq-len', '256', '--micro-batch', '8']' returned non-zero exit status 2.")
    sys.exit(1)
    """
)


@pytest.fixture
def offline_empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))  # nothing cached: the default model is not there
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf-cache"))


def launcher_that_records(tmp_path, monkeypatch) -> object:
    ran = tmp_path / "launched"
    fake = tmp_path / "fake.py"
    fake.write_text(f"open({str(ran)!r}, 'w').close()\n")
    monkeypatch.setenv("DCG_TRIAL_LAUNCHER", f"{sys.executable} {fake}")
    return ran


@pytest.mark.parametrize(
    "extra, says",
    [
        (
            (),
            "the plan's model 'mistralai/Mistral-7B-v0.1': it is not in the Hugging Face cache and the hub is offline",
        ),
        (("--model-dir", "someorg/no-such-model"), "--model-dir someorg/no-such-model: it is not in the Hugging Face"),
        (("--model-dir", "./missing-dir"), "--model-dir ./missing-dir: no such directory"),
    ],
)
def test_a_model_train_py_cannot_load_is_refused_before_any_trial(
    tmp_path, monkeypatch, capsys, offline_empty_cache, extra, says
):
    ran = launcher_that_records(tmp_path, monkeypatch)
    cal, out = tmp_path / "cal.json", tmp_path / "o.yaml"
    assert main([*PLAN, *extra, "--calibration-file", str(cal), "--output", str(out)]) == 2
    captured = capsys.readouterr()
    assert says in captured.err and captured.err.count("\n") == 1, captured.err
    assert "trial 1/" not in captured.out
    assert not ran.exists() and not cal.exists() and not out.exists()


def test_a_model_dir_without_config_or_tokenizer_is_refused(tmp_path, monkeypatch, capsys):
    d = tmp_path / "m"
    d.mkdir()
    assert main([*PLAN, "--model-dir", str(d), "--calibration-file", str(tmp_path / "c.json")]) == 2
    assert "has no config.json" in capsys.readouterr().err
    (d / "config.json").write_text("{}")
    assert main([*PLAN, "--model-dir", str(d), "--calibration-file", str(tmp_path / "c.json")]) == 2
    assert "has no tokenizer files" in capsys.readouterr().err


def test_a_failed_trial_shows_the_childs_error_line_and_records_nothing(tmp_path, monkeypatch, capsys):
    fake = tmp_path / "fail.py"
    fake.write_text(FAILING_LAUNCHER)
    monkeypatch.setenv("DCG_TRIAL_LAUNCHER", f"{sys.executable} {fake}")
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text("{}")
    (d / "tokenizer.json").write_text("{}")
    cal, out = tmp_path / "cal.json", tmp_path / "o.yaml"
    assert main([*PLAN, "--model-dir", str(d), "--calibration-file", str(cal), "--output", str(out)]) == 2
    captured = capsys.readouterr()
    failed = [ln for ln in captured.out.splitlines() if ln.strip().startswith("failed:")]
    assert len(failed) == 2, captured.out
    assert all("exit 1: train.py: error: cannot load model 'x'" in ln for ln in failed)
    assert "CalledProcessError" not in captured.out
    assert not cal.exists() and not out.exists() and "measurements appended" not in captured.out


def test_child_error_prefers_train_py_then_the_raised_exception_over_the_launchers_wrapper():
    wrapper = "subprocess.CalledProcessError: Command '['python', 'train.py']' returned non-zero exit status 1."
    own = "train.py: error: --seq-len 9 is above 'm''s max_position_embeddings 8"
    assert child_error(f"noise\n[rank0]: {own}\nTraceback (most recent call last):\n{wrapper}\n") == own
    raised = "torch.distributed.DistBackendError: NCCL error in: init"
    assert child_error(f"Traceback (most recent call last):\n  File x\n{raised}\n{wrapper}\n") == raised
    assert child_error("starting\nKilled\n") == "Killed"
    assert child_error("") == "no output"
    assert len(child_error("x" * 1000)) == 300
