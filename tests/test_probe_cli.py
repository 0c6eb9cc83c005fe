"""`probe` argument errors are one clear line, and `probe --help` does not import torch."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def probe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "generator", "probe", *args], cwd=ROOT, capture_output=True, timeout=60
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--device", "cpu", "--gpus", "0"), b"at least two GPUs"),
        (("--device", "cpu", "--gpus", "a,b"), b"comma list"),
        (("--device", "cpu", "--sizes", "12Q"), b"is not like"),
        (("--device", "cpu", "--backend", "nccl"), b"needs --device cuda"),
    ],
)
def test_bad_arguments(args, needle):
    r = probe(*args)
    assert r.returncode == 2 and needle in r.stderr and b"Traceback" not in r.stderr


def test_output_is_checked_before_measuring(tmp_path):
    existing = tmp_path / "bw.json"
    existing.write_text("{}")
    r = probe("--device", "cpu", "--output", str(existing))
    assert r.returncode == 2 and b"already exists" in r.stderr and existing.read_text() == "{}"


def test_help_does_not_import_torch():
    code = (
        "import sys\nfrom generator.cli import main\n"
        "try:\n    main(['probe', '--help'])\nexcept SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, timeout=60)
    assert r.returncode == 0 and b"--p2p-disable" in r.stdout, r.stderr
