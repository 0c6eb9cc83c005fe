"""Topology inputs a newcomer has at hand (issue 19, items 2 and 3): a raw `nvidia-smi topo -m` capture without its
.json sidecar (GPU name and memory then come from --gpu / --gpu-memory-gb, never a negative budget) and what
`topo --json` printed, fed back to --topo-file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from generator.cli import main

MACHINES = Path(__file__).resolve().parents[1] / "generator" / "machines"


@pytest.fixture
def raw_capture(tmp_path) -> str:
    path = tmp_path / "topo.txt"  # no topo.json beside it
    shutil.copy(MACHINES / "hgx-h200-8.txt", path)
    return str(path)


def test_plan_on_a_raw_capture_says_name_and_memory_are_unknown_and_how_to_give_them(capsys, raw_capture):
    assert main(["plan", "--model", "mistral-7b", "--topo-file", raw_capture]) == 2
    out, err = capsys.readouterr()
    assert "-1.1 GB" not in out + err and "0 GB" not in out
    assert err.startswith("error: GPU name and memory unknown") and err.count("\n") == 1
    assert "--gpu NAME" in err and "--gpu-memory-gb" in err and "FILE.json" in err


def test_gpu_flag_names_the_part_and_fills_memory_from_the_catalog(capsys, raw_capture):
    assert main(["plan", "--model", "mistral-7b", "--topo-file", raw_capture, "--gpu", "H200", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["chosen"]["capacity_gb"] > 100
    assert any("GPU catalog's 150.75 GB" in w for w in doc["warnings"])
    assert main(["topo", "--topo-file", raw_capture, "--gpu", "H200", "--json"]) == 0
    gpus = json.loads(capsys.readouterr().out)["gpus"]
    assert {g["name"] for g in gpus} == {"H200"} and {g["memory_gb"] for g in gpus} == {150.75}


def test_gpu_memory_flag_sets_the_budget(capsys, raw_capture):
    assert main(["plan", "--model", "mistral-7b", "--topo-file", raw_capture, "--gpu-memory-gb", "80", "--json"]) == 0
    chosen = json.loads(capsys.readouterr().out)["chosen"]
    assert 60 < chosen["capacity_gb"] < 80


@pytest.mark.parametrize("argv", [["--machine", "h200-sxm-2", "--gpu", "H100"], ["--gpu-memory-gb", "-3"]])
def test_gpu_flags_refuse_what_they_cannot_mean(capsys, argv):
    assert main(["topo", *argv]) == 2
    assert capsys.readouterr().err.count("error:") == 1


def test_topo_json_is_accepted_back_by_topo_file(capsys, tmp_path):
    assert main(["topo", "--machine", "h200-nvl-8", "--json"]) == 0
    saved = json.loads(capsys.readouterr().out)
    path = tmp_path / "nvl.json"
    path.write_text(json.dumps(saved))
    assert main(["topo", "--topo-file", str(path), "--num-gpus", "4", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["gpus"] == saved["gpus"] and again["links"] == saved["links"] and again["islands"] == saved["islands"]
    assert again["selected"] == [0, 1, 2, 3]
    assert main(["plan", "--model", "mistral-7b", "--topo-file", str(path), "--num-gpus", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["gpu_ids"] == [0, 1, 2, 3]


def test_a_broken_json_topology_is_one_line(capsys, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"gpus": [{"index": 0}, {"index": 1}], "links": {}}')
    assert main(["topo", "--topo-file", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.json" in err and "0-1" in err
