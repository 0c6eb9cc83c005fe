"""The configs a recipe README writes with its own `python -m generator plan ... --output FILE` (recipes/trl-sft/), and
no scenario of docsgen/recipes.py does, rewritten by that command. tests/test_readme_paths.py runs the same commands
and fails on any byte of difference, so an estimator change must come through here too.

    .venv/bin/python -m docsgen.readme_plans      (or `python -m docsgen` for every generated document)
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import sys
from pathlib import Path

from generator.cli import main as generator_main

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(?:sh|bash)\n(.*?)^```", re.S | re.M)
PLAN = ["python", "-m", "generator", "plan"]


def shell_commands(text: str) -> list[str]:
    """The command lines of a README's sh/bash blocks, continuations joined, blank and comment lines dropped (also
    what tests/test_readme_paths.py runs and checks)."""
    out = []
    for body in FENCE.findall(text):
        for line in body.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def words(command: str) -> list[str]:
    """The command's words without `VAR=value` prefixes and trailing `# comment`."""
    w = shlex.split(command, comments=True)
    while w and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", w[0]):
        w.pop(0)
    return w


def plan_commands(text: str) -> list[list[str]]:
    """Each `python -m generator plan ... --output FILE` of the README's sh/bash blocks, as words."""
    return [w for w in map(words, shell_commands(text)) if w[:4] == PLAN and "--output" in w[:-1]]


def regenerate(root: Path = ROOT, done: tuple[Path, ...] = ()) -> list[Path]:
    """Run every such command whose output is a committed file not in `done` (what the other generators wrote),
    from `root`; return the files rewritten."""
    written, skip = [], {p.resolve() for p in done}
    for readme in sorted((root / "recipes").rglob("README.md")):
        for words in plan_commands(readme.read_text()):
            out = (root / words[words.index("--output") + 1]).resolve()
            if out in skip or not out.is_file():
                continue
            args = [*words[3:], *([] if "--force" in words else ["--force"])]
            code = _run_in(root, args)
            if code != 0:
                raise SystemExit(f"{readme.relative_to(root)}: `{shlex.join(words)}` exited {code}")
            written.append(out)
    return sorted(written)


def _run_in(root: Path, args: list[str]) -> int:
    """The generator's CLI from `root` (the README's paths are relative to it), its printed plan dropped."""
    here = os.getcwd()
    os.chdir(root)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return generator_main(args)
    finally:
        os.chdir(here)


if __name__ == "__main__":
    for path in regenerate():
        print(path)
    sys.exit(0)
