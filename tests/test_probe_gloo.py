"""The probe's measuring path on CPU over gloo, 2 processes, small messages: the same spawn/worker/file code the GPU
run uses. Asserts bookkeeping (busbw vs algbw, slowest-rank times, file round trip), not speed."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from generator.probe.bandwidth_file import build_document, load_bandwidth_file
from generator.probe.collectives import COLLECTIVES, bus_factor
from generator.probe.runner import run_probe
from generator.probe.subsets import choose_subsets

pytest.importorskip("torch.distributed")
ROOT = Path(__file__).resolve().parents[1]
SIZES = [1024**2, 4 * 1024**2]


@pytest.fixture(scope="module")
def measured():
    subsets = choose_subsets([0, 1])
    seen = []
    results = run_probe(
        [0, 1],
        subsets,
        SIZES,
        COLLECTIVES,
        backend="gloo",
        device="cpu",
        warmup=1,
        repeats=3,
        timeout_s=120,
        on_measurement=lambda key, m: seen.append(key),
    )
    return subsets, results, seen


def test_every_collective_and_size_measured(measured):
    subsets, results, seen = measured
    ms = results["0,1"]
    assert {(m.collective, m.size_bytes) for m in ms} == {(c, s) for c in COLLECTIVES for s in SIZES}
    assert len(seen) == len(ms) == len(COLLECTIVES) * len(SIZES)  # progress saw each one
    for m in ms:
        assert m.ranks == 2 and len(m.times_s) == 3 and all(t > 0 for t in m.times_s)
        assert m.algbw_gbps == pytest.approx(m.size_bytes / m.median_s / 1e9)
        assert m.busbw_gbps == pytest.approx(m.algbw_gbps * bus_factor(m.collective, 2))


def test_document_round_trips_through_the_planner_reader(measured, tmp_path):
    _, results, _ = measured
    doc = build_document("cpu", [0, 1], results, {"torch": "x", "backend": "gloo"})
    path = tmp_path / "bw.json"
    path.write_text(json.dumps(doc))
    largest = max(m for m in results["0,1"] if m.collective == "all_reduce" and m.size_bytes == SIZES[-1]).busbw_gbps
    assert load_bandwidth_file(str(path)) == {(0, 1): round(largest, 3)}
    assert set(doc["subsets"]["0,1"]["sizes"]) == {"1M", "4M"}


def test_cli_probe_on_cpu_writes_a_loadable_file(tmp_path):
    out = tmp_path / "probe.json"
    cmd = [sys.executable, "-m", "generator", "probe", "--device", "cpu", "--sizes", "1M", "--repeats", "2",
           "--quick", "--output", str(out)]  # fmt: skip
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, timeout=180)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    assert b"all-reduce" in r.stdout and b"wrote" in r.stdout
    doc = json.loads(out.read_text())
    assert doc["version"] == 1 and doc["gpus"] == [0, 1] and doc["env"]["backend"] == "gloo"
    assert set(load_bandwidth_file(str(out))) == {(0, 1)}
