"""What a newcomer reads from `make demo`, i.e. plan output that is not a terminal (issue 19, item 9): the table at
full width, the choice marked in plain text, the no-GPU notice before the table, the wizard's file ignored by git,
and a license field setuptools does not warn about."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from generator.cli import main
from generator.topology import detect, load_machine

ROOT = Path(__file__).resolve().parents[1]


def test_piped_plan_table_is_not_cut_to_80_columns_and_marks_the_choice(capsys):
    assert main(["plan", "--model", "mistral-7b", "--machine", "h200-sxm-2", "--precision", "bf16"]) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line.startswith("│")]
    assert len(table) == 8  # one line per strategy (bf16: float8 runs under DDP alone): nothing wrapped
    assert "…" not in out and "zero3_offload" in out and "tokens/s/GPU" in out
    assert [line.split("│")[1].strip() for line in table if "* " in line.split("│")[1]] == ["* fsdp"]
    assert "* = the plan's choice" in out


def test_no_gpu_notice_comes_before_the_table(monkeypatch, capsys):
    fallback = load_machine("h200-sxm-2")
    fallback = replace(fallback, warnings=("no NVIDIA GPU detected (test): showing the reference machine h200-sxm-2",))
    monkeypatch.setattr(detect, "detect_live", lambda: fallback)
    assert main(["plan", "--model", "mistral-7b"]) == 0
    lines = capsys.readouterr().out.splitlines()
    notice = next(i for i, line in enumerate(lines) if "no NVIDIA GPU detected" in line)
    heading = next(i for i, line in enumerate(lines) if "2x NVIDIA H200" in line)
    assert notice < heading


def test_the_wizards_default_output_is_ignored_by_git():
    done = subprocess.run(
        ["git", "check-ignore", "-q", "accelerate_config.yaml"], cwd=ROOT, capture_output=True, check=False
    )
    if done.returncode == 128:  # not a git checkout (an sdist): nothing to ignore
        return
    assert done.returncode == 0


def test_license_is_an_spdx_string():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert not any(c.startswith("License ::") for c in project.get("classifiers", []))
