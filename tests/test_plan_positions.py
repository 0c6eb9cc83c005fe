"""Sequence lengths past a model's positions: refused in one line where the run cannot start, warned where it only
extrapolates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from generator.model import load_model  # noqa: E402
from tests.test_estimate_expert_flops import BASE, CASES  # noqa: E402


@pytest.mark.parametrize(
    ("model_type", "script", "refused"),
    [("gpt2", "trainer", True), ("mistral", "trainer", False), ("mistral", "train.py", True)],
)
def test_a_sequence_past_the_models_positions_is_refused_where_it_cannot_run(
    tmp_path: Path, capsys, model_type, script, refused
):
    """GPT-2 looks positions up in a table (meta: an embedding of max_position_embeddings rows beside the tokens'), so
    a longer sequence fails at its first step under any script; a rotary model only extrapolates (a warning), except
    under train.py, which refuses the length at load. Refused: one line naming the limit, exit 2, nothing written."""
    from generator.cli import main

    config = {**BASE, **CASES.get(model_type, {"intermediate_size": 96}), "model_type": model_type}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert load_model(str(tmp_path)).position_table is (model_type == "gpt2")
    out = tmp_path / "a.yaml"
    argv = ["plan", "--model", str(tmp_path), "--machine", "h200-sxm-2", "--num-gpus", "1", "--seq-len", "256",
            "--script", script, "--force", "--output", str(out)]  # fmt: skip
    assert main(argv) == (2 if refused else 0)
    said = capsys.readouterr()
    if refused:
        assert said.err.strip().splitlines()[-1].endswith("use --seq-len 128 or less") and not out.exists()
    else:
        assert "--seq-len 256 exceeds the model's 128 positions" in said.out + said.err


def test_a_config_naming_no_positive_limit_is_planned_and_trained_at_any_length(tmp_path: Path, capsys):
    """XLNet's max_position_embeddings is -1 (no limit): neither the plan nor train.py's load check reads it as one
    (both through generator.model.types.positions_limit)."""
    from types import SimpleNamespace

    from generator.cli import main
    from generator.errors import UserError
    from tests.tiny_model import build_tokenizer
    from training.model import load_config_and_tokenizer

    config = {**BASE, "intermediate_size": 96, "max_position_embeddings": -1, "model_type": "mistral"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert load_model(str(tmp_path)).max_seq_len is None
    argv = ["plan", "--model", str(tmp_path), "--machine", "h200-sxm-2", "--num-gpus", "1", "--seq-len", "256",
            "--force", "--output", str(tmp_path / "a.yaml")]  # fmt: skip
    assert main(argv) == 0
    assert "positions" not in capsys.readouterr().out
    build_tokenizer(tmp_path)
    config, _ = load_config_and_tokenizer(SimpleNamespace(model=str(tmp_path), seq_len=256))
    assert config.max_position_embeddings == -1
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), "max_position_embeddings": 128}))
    with pytest.raises(UserError, match="--seq-len 256 is above"):
        load_config_and_tokenizer(SimpleNamespace(model=str(tmp_path), seq_len=256))


def test_without_seq_len_a_short_position_table_sets_the_length(tmp_path: Path, capsys):
    """`plan --model` of GPT-2 with no --seq-len plans its 128 positions (the default 4,096 where a model has more),
    instead of refusing the default."""
    from generator.cli import main

    (tmp_path / "config.json").write_text(json.dumps({**BASE, **CASES["gpt2"], "model_type": "gpt2"}))
    argv = ["plan", "--model", str(tmp_path), "--machine", "h200-sxm-2", "--num-gpus", "1", "--json", "--force",
            "--output", str(tmp_path / "a.yaml")]  # fmt: skip
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["seq_len"] == 128
