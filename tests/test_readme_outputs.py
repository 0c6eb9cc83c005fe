"""The outputs README.md shows are what the commands print now, piped (issue 19 item 9): every ```text block that
starts with `$ python -m generator ...` is run, and each shown line must appear, in order, in the real output.
Abridged is fine, invented is not: `...` and `(...)` stand for omitted text, and whitespace runs compare as one space
(a terminal and a pipe wrap the same text at different columns)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```text\n\$ (python -m generator [^\n]*)\n(.*?)^```", re.S | re.M)
OMITTED = re.compile(r"\s*(?:\(\.\.\.\)|\.\.\.)\s*")


def shown_outputs() -> list[tuple[str, str]]:
    return BLOCK.findall((ROOT / "README.md").read_text())


def squeeze(text: str) -> str:
    return " ".join(text.split())


def missing(shown: str, real: str) -> list[str]:
    """The shown fragments not found in `real` in order (empty when every line is there)."""
    real, at, lost = squeeze(real), 0, []
    for line in shown.splitlines():
        for fragment in filter(None, (squeeze(f) for f in OMITTED.split(line))):
            found = real.find(fragment, at)
            if found < 0:
                lost.append(fragment)
            else:
                at = found + len(fragment)
    return lost


def test_the_readme_shows_outputs():
    assert len(shown_outputs()) >= 3


@pytest.mark.parametrize(("command", "shown"), shown_outputs(), ids=lambda c: c if c.startswith("python") else "")
def test_shown_output_is_the_real_output(command, shown):
    argv = [sys.executable, *shlex.split(command)[1:]]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    real = done.stdout + done.stderr
    live = "--machine" not in command and "--topo-file" not in command
    if live and "no NVIDIA GPU detected" not in real:
        pytest.skip("the README shows this command on a machine without an NVIDIA GPU")
    assert not missing(shown, real), real


def test_an_invented_line_is_caught():
    assert missing("a ... c", "a b c") == [] and missing("a (...) d", "a b c") == ["d"]
