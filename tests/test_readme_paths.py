"""Every path and command a README names exists and parses.

READMEs: the top-level README.md, recipes/**/README.md, accelerate_configs/README.md and bench/README.md (when present).
- Paths: inline code spans, markdown links and command words that name a file under the repository's own folders
  (placeholders such as `<machine>` are skipped; a recipe README's bare `config.yaml` is relative to its folder).
- Commands, from ```sh / ```bash blocks (backslash continuations joined, `VAR=value` prefixes dropped):
  `python -m generator VERB ...` parses with the generator's own argparse, and `plan`/`topo` on a bundled reference
  machine really run (exit 0); a `plan --output` into the repository must rewrite the committed file byte for byte.
  `python -m MODULE` names an importable module; `python SCRIPT.py` names an existing script.
  `accelerate launch --config_file X train.py ...`: accelerate's own parser takes the line, X loads with
  accelerate's `load_config_from_file`, and the train.py flags parse with train.py's `parse_args`.
  `sbatch X`: X exists and passes `bash -n`. `make T`: T is a Makefile target.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from docsgen.readme_plans import shell_commands, words
from generator.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
REPO_DIRS = ("generator/", "docsgen/", "recipes/", "accelerate_configs/", "bench/", "tests/")
REPO_FILES = ("train.py", "Makefile", "pyproject.toml", "README.md")
RUNNABLE_VERBS = ("plan", "topo")


def readmes() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "accelerate_configs" / "README.md", ROOT / "bench" / "README.md"]
    found += sorted((ROOT / "recipes").rglob("README.md"))
    return [p for p in found if p.is_file()]


def rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def looks_like_repo_path(token: str) -> bool:
    token = token.strip()
    if any(c in token for c in "<>*${}| ") or "..." in token:
        return False
    return token in REPO_FILES or token.startswith(REPO_DIRS)


def resolve(token: str, readme: Path) -> Path:
    local = readme.parent / token
    return local if local.exists() else ROOT / token


def named_paths(readme: Path) -> set[str]:
    text = readme.read_text()
    tokens = set(re.findall(r"`([^`\n]+)`", text))
    tokens |= {m for m in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in m and not m.startswith("#")}
    for command in shell_commands(text):
        tokens |= set(words(command))
    return {t.rstrip(".,:;") for t in tokens if looks_like_repo_path(t.rstrip(".,:;"))} | {
        t for t in tokens if readme.parent != ROOT and (readme.parent / t).is_file()
    }


CASES = [pytest.param(p, id=rel(p)) for p in readmes()]


def test_the_readmes_the_issue_names_are_found():
    names = {rel(p) for p in readmes()}
    assert {"README.md", "accelerate_configs/README.md", "recipes/README.md"} <= names
    assert "recipes/multinode-hgx-h200-8x2-hsdp/README.md" in names


@pytest.mark.parametrize("readme", CASES)
def test_every_named_path_exists(readme):
    missing = sorted(t for t in named_paths(readme) if not resolve(t, readme).exists())
    assert not missing, f"{rel(readme)} names missing paths: {missing}"


def load_train_module():
    spec = importlib.util.spec_from_file_location("train_for_readme_test", ROOT / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_accelerate_launch(w: list[str], train) -> None:
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import launch_command_parser

    args = launch_command_parser().parse_args(w[2:])
    assert args.config_file and (ROOT / args.config_file).is_file(), f"missing config {args.config_file}"
    load_config_from_file(str(ROOT / args.config_file))
    if args.training_script == "train.py":
        train.parse_args(list(args.training_script_args))
    elif args.module and args.training_script == "trl.scripts.sft":  # TRL's own script: its own parser must accept
        pytest.importorskip("trl")
        from trl.scripts.sft import make_parser

        # argparse only: building SFTConfig would validate bf16 against this CPU-only machine
        _, unknown = make_parser().parse_known_args(list(args.training_script_args))
        assert not unknown, f"TRL's sft.py does not take {unknown}"
    else:  # another script of this repository (bench/scripts/trl_sft.py): its own parser must accept the flags
        assert (ROOT / args.training_script).is_file(), f"missing script {args.training_script}"
        spec = importlib.util.spec_from_file_location("script_for_readme_test", ROOT / args.training_script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.parse_args(list(args.training_script_args))


def run_generator(w: list[str], tmp_path: Path) -> None:
    """Run in an empty directory so no committed file is touched; an --output inside the repository must come out
    identical to the committed file (the README's command is the one that wrote it)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    output = w[w.index("--output") + 1] if "--output" in w else None
    if output:
        (tmp_path / output).parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, *w[1:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{shlex.join(w)}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    if output and (ROOT / output).is_file():
        for fresh in (tmp_path / output).parent.iterdir():
            committed = ROOT / Path(output).parent / fresh.name
            assert committed.read_bytes() == fresh.read_bytes(), f"{shlex.join(w)} does not rewrite {committed}"
    shutil.rmtree(tmp_path)
    tmp_path.mkdir()


@pytest.mark.parametrize("readme", CASES)
def test_every_shell_command_parses(readme, tmp_path):
    train = None
    checked = 0
    for command in shell_commands(readme.read_text()):
        w = words(command)
        if w[:3] == ["python", "-m", "generator"]:
            args = build_parser().parse_args(w[3:])  # SystemExit (a failure) when it does not parse
            if args.verb in RUNNABLE_VERBS and "--machine" in w:
                run_generator(w, tmp_path)
        elif w[:2] == ["python", "-m"]:
            assert importlib.util.find_spec(w[2]) is not None, f"no module {w[2]}"
        elif w[0] == "python" and w[1].endswith(".py"):
            assert (ROOT / w[1]).is_file(), f"missing script {w[1]}"
        elif w[:2] == ["accelerate", "launch"]:
            train = train or load_train_module()
            check_accelerate_launch(w, train)
        elif w[0] == "sbatch":
            script = ROOT / w[-1]
            assert script.is_file(), f"missing {w[-1]}"
            subprocess.run(["bash", "-n", str(script)], check=True)
        elif w[0] == "make":
            targets = re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M)
            assert all(t in targets for t in w[1:]), f"unknown make target in {command!r}"
        else:
            continue
        checked += 1
    if readme.parent.parent == ROOT / "recipes":  # every recipe README has runnable commands
        assert checked >= 2, f"{rel(readme)}: expected a plan and a launch command"
