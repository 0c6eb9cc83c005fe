"""Liger per architecture (generator/catalog/liger.py, issue 26): the planner chooses it only where its kernels are
known to work under train.py, says why not elsewhere, and train.py notes a --liger run on an unmeasured one."""

from __future__ import annotations

import importlib.util
import json

import pytest

from generator.catalog.liger import EXCLUDED, LIGER, liger_plannable, liger_run_note
from generator.cli import main


@pytest.fixture
def liger_installed(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "liger_kernel" else real(name, *a)
    )


def _plan(capsys, model, method, seq):
    args = ["plan", "--model", model, "--method", method, "--seq-len", str(seq), "--machine", "h200-sxm-2",
            "--num-gpus", "1", "--precision", "bf16", "--json"]  # fmt: skip
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_mixtral_is_never_planned_with_liger_and_the_plan_says_why(capsys, liger_installed):
    d = _plan(capsys, "mixtral-8x7b", "qlora", 4096)
    assert "--liger" not in d["launch_command"]
    line = next(r for r in d["reasons"] if r.startswith("Liger not chosen for mixtral"))
    # the evidence in words a user can follow (where it was seen, the table), never a tracker number
    assert "on one H200" in line and "generator/catalog/liger.py" in line and "issue" not in line
    assert not any("pip install liger-kernel" in r for r in d["reasons"])  # nor advertised as a gain


def test_dense_families_running_the_measured_kernels_stay_plannable(capsys, liger_installed):
    d = _plan(capsys, "llama-3-8b", "lora", 8192)
    assert any(r.startswith("Liger on") or r.startswith("Liger off") for r in d["reasons"])
    assert liger_plannable("llama") and liger_plannable("qwen2") and liger_plannable("mistral")


def test_train_py_notes_liger_only_where_the_planner_would_not_choose_it():
    assert liger_run_note("mistral") is None and liger_run_note("llama") is None
    assert "unmeasured" in liger_run_note("mixtral") and "\n" not in liger_run_note("mixtral")
    assert "unmeasured" in liger_run_note("gpt_oss")
    assert all(fit.evidence for fit in LIGER.values()) and LIGER["mixtral"].status == EXCLUDED
