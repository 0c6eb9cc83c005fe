"""The README's "try train.py on CPU in a minute" one-liner runs as written (issue 19, item 13)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_cpu_one_liner_trains():
    lines = re.findall(r"^D=\$\(mktemp -d\) && .*$", (ROOT / "README.md").read_text(), flags=re.M)
    assert len(lines) == 1, "the README's CPU one-liner is missing"
    command = lines[0].replace(".venv/bin/python", sys.executable)  # the interpreter running the tests
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "step 10" in done.stdout + done.stderr or "10/10" in done.stdout + done.stderr, done.stderr[-2000:]
