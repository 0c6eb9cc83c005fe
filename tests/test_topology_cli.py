"""`python -m generator topo`: the JSON interface, the text report, exit code 2 on bad input, and a fast --help."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from generator.cli import main
from tests.test_topology_parse import FIX

ROOT = Path(__file__).parents[1]


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["topo", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_interface_on_nvl(capsys):
    code, out, _ = run_cli(capsys, "--machine", "h200-nvl-8", "--num-gpus", "4", "--json")
    data = json.loads(out)
    assert code == 0
    assert [g["index"] for g in data["gpus"]] == list(range(8))
    assert set(data["gpus"][0]) >= {"index", "name", "memory_gb", "numa"}
    assert data["gpus"][0]["memory_gb"] == 150.75 and data["gpus"][4]["numa"] == 1
    assert len(data["links"]) == 28 and all(int(k.split("-")[0]) < int(k.split("-")[1]) for k in data["links"])
    assert data["links"]["0-1"] == {"kind": "NV", "nvlinks": 6, "busbw_gbps": 112.9, "p2p": None}
    assert data["links"]["3-4"]["kind"] == "SYS" and data["links"]["3-4"]["nvlinks"] == 0
    assert data["islands"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert data["selected"] == [0, 1, 2, 3]
    assert data["bottleneck_busbw_gbps"] == pytest.approx(322, abs=5)
    assert data["device_order"] == "PCI_BUS_ID" and any("CUDA_DEVICE_ORDER=PCI_BUS_ID" in n for n in data["notes"])


def test_json_without_num_gpus_has_no_selection(capsys):
    code, out, _ = run_cli(capsys, "--machine", "pcie-l40s-8", "--json")
    data = json.loads(out)
    assert code == 0 and "selected" not in data and data["islands"] == [[i] for i in range(8)]


def test_json_single_gpu_bottleneck_is_null(capsys):
    _, out, _ = run_cli(capsys, "--machine", "hgx-h200-8", "--num-gpus", "1", "--exclude", "0", "--json")
    data = json.loads(out)
    assert data["selected"] == [1] and data["bottleneck_busbw_gbps"] is None and data["excluded"] == [0]


def test_text_nvl_four_picks_one_group_and_explains(capsys):
    code, out, _ = run_cli(capsys, "--machine", "h200-nvl-8", "--num-gpus", "4")
    assert code == 0
    assert "Selected GPUs (PCI order): 0,1,2,3" in out
    assert "share one NVLink island" in out and "35 GB/s" in out
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in out


def test_text_nvl_eight_warns_about_spanning_groups(capsys):
    code, out, _ = run_cli(capsys, "--machine", "h200-nvl-8", "--num-gpus", "8")
    flat = " ".join(out.split())
    assert code == 0
    assert "WARNING: the job spans NVLink islands" in flat
    assert "35 GB/s against 322 GB/s" in flat and "9.2x" in flat
    assert "shard group size 4" in flat


def test_text_matrix_and_islands(capsys):
    code, out, _ = run_cli(capsys, "--topo-file", str(FIX / "v100-dgx1-cube-mesh.txt"))
    assert code == 0 and "NV2" in out and "GPUs 0,1,2,3,4,5,6,7: 8 GPUs, bridged / mesh" in out
    assert "warning:" in out  # GPU model and memory unknown from bare topo -m text


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--topo-file", str(FIX / "bad-p2p-matrix.txt")], "-p2p"),
        (["--topo-file", str(FIX / "bad-empty.txt")], "empty"),
        (["--topo-file", str(FIX / "bad-binary.bin")], "binary"),
        (["--topo-file", str(FIX / "bad-smi-error.txt")], "error message"),
        (["--topo-file", str(FIX / "bad-nonsquare.txt")], "not square"),
        (["--topo-file", str(FIX / "bad-asymmetric.txt")], "not symmetric"),
        (["--topo-file", str(FIX / "bad-unknown-code.txt")], "unknown link code"),
        (["--topo-file", "/nonexistent/topo.txt"], "does not exist"),
        (["--machine", "h200-nvl-8", "--num-gpus", "7", "--exclude", "0,3"], "after excluding 0,3"),
        (["--machine", "h200-nvl-8", "--exclude", "9"], "--exclude names GPU 9"),
    ],
)
def test_bad_input_one_line_exit_2(capsys, argv, needle):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and needle in err and err.count("\n") == 1


def _python(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, input=stdin, capture_output=True, timeout=60)


def test_help_is_fast_and_imports_no_torch():
    probe = (
        "import sys, time; t = time.perf_counter()\n"
        "from generator.cli import main\n"
        "try:\n    main(['topo', '--help'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
        "sys.stderr.write('%.3f ' % (time.perf_counter() - t))\n"
        "bad = [m for m in ('torch', 'transformers', 'accelerate', 'datasets') if m in sys.modules]\n"
        "sys.stderr.write(','.join(bad) or 'clean')\n"
    )
    done = _python("-c", probe)
    seconds, verdict = done.stderr.decode().split()
    assert done.returncode == 0 and "--num-gpus" in done.stdout.decode() and "--machine" in done.stdout.decode()
    assert verdict == "clean"
    assert float(seconds) < 1.0


def test_topo_run_imports_no_torch():
    probe = (
        "import sys\nfrom generator.cli import main\n"
        "assert main(['topo', '--machine', 'hgx-h200-8', '--num-gpus', '4', '--json']) == 0\n"
        "assert not any(m in sys.modules for m in ('torch', 'transformers')), 'heavy import'\n"
    )
    done = _python("-c", probe)
    assert done.returncode == 0, done.stderr.decode()


def test_real_process_stdin_and_exit_code():
    data = (FIX / "h200-sxm-2x-nvswitch.topo-m.txt").read_bytes()
    done = _python("-m", "generator", "topo", "--topo-file", "-", "--num-gpus", "2", "--json", stdin=data)
    assert done.returncode == 0 and json.loads(done.stdout)["selected"] == [0, 1]
    bad = _python("-m", "generator", "topo", "--topo-file", str(FIX / "bad-p2p-matrix.txt"))
    assert bad.returncode == 2 and b"Traceback" not in bad.stderr and bad.stderr.count(b"\n") == 1
