"""The model a printed launch line names. `plan --model` reads a preset, a hub id, a directory or a config file; the
scripts load weights and a tokenizer, so the line must name something they can load: a preset's hub id, the directory
of a checkpoint's config.json, and for a config file alone a placeholder the plan's reasons explain."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from generator.model.presets import CHECKPOINT_PLACEHOLDER, PRESET_HUB_IDS, PRESETS, checkpoint_name

ROOT = Path(__file__).resolve().parents[1]


def plan(*flags: str) -> dict:
    from generator.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["plan", "--machine", "h200-sxm-2", "--method", "lora", "--seq-len", "64", *flags, "--json"])
    assert code == 0, err.getvalue()
    return json.loads(out.getvalue())


def model_word(launch: str, flag: str = "--model") -> str:
    words = shlex.split(launch)
    return words[words.index(flag) + 1]


def test_presets_name_their_hub_ids_and_other_names_pass_through():
    assert {checkpoint_name(p) for p in PRESETS} == set(PRESET_HUB_IDS.values())
    assert checkpoint_name("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"
    assert checkpoint_name("ckpt/my-model") == "ckpt/my-model"
    assert checkpoint_name("runs/base/config.json") == "runs/base"
    assert checkpoint_name("bench/models/qwen3-8b.json") is None


def test_a_checkpoints_config_json_launches_its_directory_which_train_py_loads(tmp_path):
    """Planned from DIR/config.json, the printed line names DIR, and train.py's loader reads config and tokenizer
    from it."""
    from tests.tiny_model import build_tiny_mistral
    from training.model import load_config_and_tokenizer

    build_tiny_mistral(tmp_path / "tiny")
    out = plan("--model", str(tmp_path / "tiny" / "config.json"), "--output", str(tmp_path / "a.yaml"))
    named = model_word(out["launch_command"])
    assert named == str(tmp_path / "tiny")
    assert not any(r.startswith("launch line:") for r in out["reasons"])
    config, tok = load_config_and_tokenizer(SimpleNamespace(model=named, seq_len=64))
    assert config.model_type == "mistral" and tok.pad_token_id is not None


@pytest.mark.parametrize("script,flag", [("train.py", "--model"), ("trainer", "--model_name_or_path")])
def test_a_config_file_alone_names_a_placeholder_and_says_why(tmp_path, script, flag):
    config = tmp_path / "qwen3-8b.json"
    shutil.copy(ROOT / "bench" / "models" / "qwen3-8b.json", config)
    out = plan("--model", str(config), "--script", script, "--output", str(tmp_path / "b.yaml"))
    assert model_word(out["launch_command"], flag) == CHECKPOINT_PLACEHOLDER
    said = [r for r in out["reasons"] if r.startswith("launch line:")]
    assert len(said) == 1 and str(config) in said[0] and CHECKPOINT_PLACEHOLDER in said[0]
    # the YAML's header carries the same line a user copies
    assert f"{flag} {CHECKPOINT_PLACEHOLDER}" in (tmp_path / "b.yaml").read_text()
