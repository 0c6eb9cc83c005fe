"""Installed without -e (site-packages holds only the `generator` package, no checkout beside it), `plan --trial`
launches the train.py of the working directory or the one --train-script names, and without one says how to point
at it in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLAN = ["plan", "--model", "mistral-7b", "--machine", "h200-sxm-2", "--num-gpus", "1", "--strategy", "ddp",
        "--grad-checkpointing", "off", "--seq-len", "128", "--micro-batch", "1", "--trial", "--top", "1",
        "--trial-steps", "2", "--trial-device", "cpu"]  # fmt: skip
# Stands in for `accelerate launch`: records the script it was asked to run, logs two steps.
FAKE_LAUNCHER = textwrap.dedent(
    """
    import json, os, sys
    argv = sys.argv[1:]
    script = next(a for a in argv if a.endswith(".py"))
    open(os.environ["FAKE_RECORD"], "w").write(script)
    with open(argv[argv.index("--log-file") + 1], "w") as f:
        for step in (1, 2):
            f.write(json.dumps({"step": step, "step_time_s": 0.1, "tokens_per_s_per_gpu": 100.0}) + "\\n")
    """
)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """`pip install --no-deps .` of a copy of the package sources into a target directory (a copy, so the build
    leaves nothing in the checkout)."""
    base = tmp_path_factory.mktemp("installed")
    src, target = base / "src", base / "site"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "generator", src / "generator", ignore=shutil.ignore_patterns("__pycache__"))
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
           str(src), "--target", str(target)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, cwd=base)
    assert not (target / "train.py").exists() and (target / "generator" / "ui").is_dir()
    return target


def run(installed: Path, cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ, PYTHONPATH=str(installed), HF_HUB_OFFLINE="1", XDG_CACHE_HOME=str(cwd / "cache"), **env or {})
    return subprocess.run([sys.executable, "-m", "generator", *args], cwd=cwd, env=e, capture_output=True, text=True)


@pytest.mark.slow
def test_the_installed_package_is_the_one_run(installed, tmp_path):
    code = "import generator; print(generator.__file__)"
    e = dict(os.environ, PYTHONPATH=str(installed))
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=e, capture_output=True, text=True).stdout
    assert Path(out.strip()).is_relative_to(installed)


@pytest.mark.slow
def test_without_a_train_py_the_trial_says_how_to_point_at_one(installed, tmp_path):
    r = run(installed, tmp_path, *PLAN, "--output", str(tmp_path / "out.yaml"))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.stderr
    assert f"no train.py in {tmp_path}" in lines[0] and "--train-script" in lines[0]
    assert not (tmp_path / "out.yaml").exists()
    r = run(installed, tmp_path, *PLAN, "--train-script", "elsewhere/train.py")
    assert r.returncode == 2 and "no elsewhere/train.py there" in r.stderr


@pytest.mark.slow
def test_the_trial_launches_the_working_directorys_train_py_or_the_named_one(installed, tmp_path):
    fake, record = tmp_path / "fake_launch.py", tmp_path / "launched"
    fake.write_text(FAKE_LAUNCHER)
    env = {"DCG_TRIAL_LAUNCHER": f"{sys.executable} {fake}", "FAKE_RECORD": str(record)}
    (tmp_path / "train.py").write_text("")
    model = tmp_path / "model"  # what the up-front load check needs; the fake launcher loads nothing
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "tokenizer.json").write_text("{}")
    r = run(installed, tmp_path, *PLAN, "--model-dir", "model", "--output", "a.yaml", env=env)
    assert r.returncode == 0, r.stderr + r.stdout
    assert record.read_text() == str(tmp_path / "train.py")
    other = tmp_path / "scripts" / "my_train.py"
    other.parent.mkdir()
    other.write_text("")
    r = run(installed, tmp_path, *PLAN, "--model-dir", "model", "--output", "b.yaml", "--train-script",
            "scripts/my_train.py", env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr + r.stdout
    assert record.read_text() == str(other)
    assert json.loads((tmp_path / "cache" / "dist-config-generator" / "calibration.json").read_text())["measurements"]
