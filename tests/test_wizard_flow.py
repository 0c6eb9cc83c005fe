"""The whole wizard (`python -m generator` with no verb) driven by real key presses through prompt_toolkit pipe input:
real questionary prompts, real planner and emitter; only live GPU detection is pinned to "no GPU here"."""

from __future__ import annotations

import pytest
import yaml
from prompt_toolkit.application import create_app_session
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from generator.cli import main
from generator.topology import REFERENCE_MACHINES
from generator.wizard import flow

DOWN, ENTER, CTRL_C, BACKSPACE = "\x1b[B", "\r", "\x03", "\x7f"


@pytest.fixture(autouse=True)
def no_live_gpu(monkeypatch, tmp_path):
    monkeypatch.setattr(flow, "detect_live", lambda: None)
    monkeypatch.chdir(tmp_path)


def machine(name: str) -> str:
    assert name in REFERENCE_MACHINES
    return name + ENTER  # typing filters the list down to the match


def replace_text(old: str, new: str) -> str:
    return BACKSPACE * len(old) + new + ENTER


def wizard(keys: list[str]) -> int:
    with create_pipe_input() as pipe, create_app_session(input=pipe, output=DummyOutput()):
        pipe.send_text("".join(keys))
        return main([])


# machine, model, method, seq len, micro-batch, global batch, machines
SETUP = [machine("hgx-h200-8"), ENTER, ENTER, ENTER, ENTER, replace_text("auto", "64"), ENTER]


def test_accept_writes_the_config_and_prints_the_launch_command(tmp_path, capsys):
    assert wizard([*SETUP, ENTER, ENTER]) == 0  # accept, default path
    out = capsys.readouterr().out
    cfg = tmp_path / "accelerate_config.yaml"
    assert cfg.exists() and "accelerate launch --config_file accelerate_config.yaml" in out
    data = yaml.safe_load(cfg.read_text())
    assert data["num_processes"] >= 1


def test_override_strategy_and_refuse_overwrite(tmp_path, capsys):
    (tmp_path / "accelerate_config.yaml").write_text("mine\n")
    # review -> "Choose another strategy" -> type "zero2" (filters; zero2 is the first match) -> review -> accept
    # -> default path exists -> "n" -> new name
    new_name = replace_text("accelerate_config.yaml", "z2.yaml")
    keys = [*SETUP, DOWN + ENTER, "zero2" + ENTER, ENTER, ENTER, "n", new_name]
    assert wizard(keys) == 0
    assert (tmp_path / "accelerate_config.yaml").read_text() == "mine\n"
    assert yaml.safe_load((tmp_path / "z2.yaml").read_text())["distributed_type"] == "DEEPSPEED"


def test_nothing_fits_offers_lora_on_the_consumer_machine(tmp_path, capsys):
    keys = [machine("rtx4090-2"), ENTER, ENTER, ENTER, ENTER, ENTER, ENTER, ENTER, ENTER, ENTER]
    assert wizard(keys) == 0  # rescue: LoRA (default) -> accept -> default path
    out = capsys.readouterr().out
    assert "does not fit" in out and "--method lora" in out
    assert (tmp_path / "accelerate_config.yaml").exists()


@pytest.mark.parametrize("at", [0, 1, 3, 6, len(SETUP), len(SETUP) + 1])
def test_ctrl_c_anywhere_leaves_nothing_behind(tmp_path, capsys, at):
    keys = [*SETUP, ENTER][:at] + [CTRL_C]
    assert wizard(keys) == 130
    assert list(tmp_path.iterdir()) == []
    assert "nothing was written" in capsys.readouterr().err


def test_quit_at_review_writes_nothing(tmp_path):
    assert wizard([*SETUP, DOWN * 3 + ENTER]) == 0
    assert list(tmp_path.iterdir()) == []
