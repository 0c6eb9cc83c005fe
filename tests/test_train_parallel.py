"""train.py under a tensor/context-parallel launch: it stops in one line before loading anything (not built yet)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from training.parallel import model_parallel_sizes, unsupported_reason

ROOT = Path(__file__).resolve().parent.parent


def test_sizes_come_from_the_launchers_environment():
    env = {"ACCELERATE_USE_PARALLELISM_CONFIG": "true", "PARALLELISM_CONFIG_CP_SIZE": "8"}
    assert model_parallel_sizes(env) == {"tp": 1, "cp": 8, "sp": 1}
    assert model_parallel_sizes({"PARALLELISM_CONFIG_TP_SIZE": "4"}) == {"tp": 1, "cp": 1, "sp": 1}  # not in use
    hsdp = {"ACCELERATE_USE_PARALLELISM_CONFIG": "true", "PARALLELISM_CONFIG_DP_SHARD_SIZE": "4"}
    assert unsupported_reason(hsdp) is None
    assert "cp_size 8" in unsupported_reason(env)


def test_train_py_refuses_a_cp_launch_in_one_line(tmp_path):
    env = {"ACCELERATE_USE_PARALLELISM_CONFIG": "true", "PARALLELISM_CONFIG_CP_SIZE": "2", "PATH": "/usr/bin"}
    r = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "--model", "x", "--dataset", "y", "--output-dir", str(tmp_path / "o")],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "does not run tensor/context/sequence parallel yet" in r.stderr + r.stdout
