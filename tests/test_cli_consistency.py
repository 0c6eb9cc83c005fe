"""Mistakes reported the same way by every verb: one `error:` line, the same wording for the same flag, a JSON object
on stdout under --json; budgets and suggestions a newcomer can trust (issue 19, items 7 and 8)."""

from __future__ import annotations

import json

import pytest

from generator.cli import main


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--model", "mistral-7b", "--machine", "h200-sxm-2", "--num-gpus", "0", "--json"],
        ["plan", "--model", "mistral-7b", "--machine", "nope", "--json"],  # rejected by argparse itself
        ["topo", "--machine", "h200-sxm-2", "--num-gpus", "0", "--json"],
        ["topo", "--machine", "h200-sxm-2", "--num-gpus", "two", "--json"],
        ["check", "missing.yaml", "--json"],
    ],
)
def test_json_errors_are_one_parsable_object_on_stdout(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2
    doc = json.loads(out)
    assert doc["exit_code"] == 2 and doc["error"]
    assert err.count("error:") == 1 and "usage:" not in err
    assert doc["error"] in err


def test_same_mistake_same_message_in_every_verb(capsys):
    assert main(["topo", "--machine", "h200-sxm-2", "--num-gpus", "0"]) == 2
    topo_err = capsys.readouterr().err
    assert main(["plan", "--model", "mistral-7b", "--machine", "h200-sxm-2", "--num-gpus", "0"]) == 2
    plan_err = capsys.readouterr().err
    assert topo_err == plan_err == "error: --num-gpus must be at least 1, got 0\n"


def test_usage_errors_are_one_line_that_points_at_help(capsys):
    assert main(["topo", "--machine", "h200-sxm-2", "--bogus"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "usage:" not in err and "--bogus" in err and "--help" in err


def test_usable_memory_says_why_it_changes_with_the_gpu_count(capsys):
    base = ["plan", "--model", "mistral-7b", "--machine", "rtx4090-2"]
    assert main([*base, "--num-gpus", "1"]) == 2
    one = capsys.readouterr().err
    assert main([*base, "--num-gpus", "2"]) == 2
    two = capsys.readouterr().err
    assert "21.0 GB usable" in one and "20.5 GB usable" in two
    assert "NCCL buffers" in two and "NCCL" not in one
    assert main([*base, "--method", "qlora", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "NCCL buffers" in doc["usable_memory"] and f"{doc['chosen']['capacity_gb']:.1f}" == "20.5"


def test_shorter_sequence_suggestions_stay_within_the_model_positions(capsys):
    assert main(["plan", "--model", "mistral-7b", "--machine", "h200-sxm-2", "--seq-len", "10000000"]) == 2
    err = capsys.readouterr().err
    suggested = [int(w) for w in err.split("--seq-len ")[2:] for w in [w.split()[0]]]
    assert suggested and max(suggested) <= 32768, err
