"""The one GPU catalog: every name we meet resolves to a complete, sourced part; the matcher picks the specific part;
topology, estimator and planner read the same entry; an unknown GPU is said out loud in plan output."""

from __future__ import annotations

import dataclasses
import json
from importlib import resources
from pathlib import Path

import pytest

from generator.catalog.gpus import GPUS, find_gpu
from generator.cli import main
from generator.estimate import gpu_rates
from generator.model import load_model
from generator.plan.planner import make_plan
from generator.plan.types import PlanRequest
from generator.topology.machines import topology_from_text

MISTRAL = load_model("mistral-7b")
MACHINES = resources.files("generator").joinpath("machines")
TWO_GPU_TEXT = MACHINES.joinpath("h200-sxm-2.txt").read_text(encoding="utf-8")

# NVML / nvidia-smi names of current data-center and consumer parts.
NVML_NAMES = [
    "NVIDIA H100 80GB HBM3",
    "NVIDIA H100 PCIe",
    "NVIDIA H100 NVL",
    "NVIDIA H200",
    "NVIDIA H200 NVL",
    "NVIDIA GH200 480GB",
    "NVIDIA H800",
    "NVIDIA B200",
    "NVIDIA GB200",
    "NVIDIA B300 SXM6 AC",
    "NVIDIA A100-SXM4-40GB",
    "NVIDIA A100-SXM4-80GB",
    "NVIDIA A100-PCIE-40GB",
    "NVIDIA A100 80GB PCIe",
    "NVIDIA A800-SXM4-80GB",
    "NVIDIA A10",
    "NVIDIA A10G",
    "NVIDIA L4",
    "NVIDIA L40",
    "NVIDIA L40S",
    "Tesla V100-SXM2-32GB",
    "Tesla V100-PCIE-16GB",
    "Tesla T4",
    "NVIDIA GeForce RTX 3090",
    "NVIDIA GeForce RTX 4090",
    "NVIDIA GeForce RTX 5090",
    "NVIDIA RTX 6000 Ada Generation",
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition",
]
MACHINE_NAMES = sorted(
    {json.loads(f.read_text(encoding="utf-8"))["gpu_name"] for f in MACHINES.iterdir() if f.name.endswith(".json")}
)


@pytest.mark.parametrize("name", MACHINE_NAMES + NVML_NAMES)
def test_every_name_we_meet_resolves_to_a_complete_sourced_part(name):
    part = find_gpu(name)
    assert part is not None, name
    required = [f.name for f in dataclasses.fields(part) if f.name not in ("nvlink_gen", "reported_memory_gb")]
    assert all(getattr(part, f) is not None for f in required), part
    assert part.dense_bf16_tflops > 0 and part.memory_gb > 0 and part.memory_tbps > 0
    assert all(text.strip() for text in dataclasses.astuple(part.sources)), part.sources
    # A part with NVLink says which generation; a part without has no links.
    assert (part.nvlink_gen is None) == (part.nvlink_links == 0), part


def test_every_part_is_reachable_and_no_fragment_is_claimed_twice():
    fragments = [f for part in GPUS for f in part.match]
    assert len(fragments) == len(set(fragments))
    assert all(find_gpu(fragment) is part for part in GPUS for fragment in part.match)


@pytest.mark.parametrize(
    ("name", "part"),
    [
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA GH200 480GB", "GH200 (96 GB HBM3)"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L40", "L40"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM4 40GB"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA GB200", "GB200"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("nvidia rtx 6000 ada generation", "RTX 6000 Ada"),
        ("RTX4090", "GeForce RTX 4090"),  # as a user types it for --gpu
        ("rtx-5090", "GeForce RTX 5090"),
    ],
)
def test_matcher_picks_the_specific_part(name, part):
    assert find_gpu(name).name == part


@pytest.mark.parametrize("name", ["Mystery GPU", "Quadro RTX 6000", "NVIDIA A1000", "", None])
def test_names_of_parts_not_in_the_catalog_do_not_borrow_a_neighbour(name):
    assert find_gpu(name) is None


def test_geforce_parts_have_no_peer_to_peer_and_fp8_follows_the_architecture():
    assert not find_gpu("NVIDIA GeForce RTX 4090").p2p and find_gpu("NVIDIA L40S").p2p
    assert find_gpu("NVIDIA H100 80GB HBM3").fp8 and find_gpu("NVIDIA RTX 6000 Ada Generation").fp8
    assert not find_gpu("NVIDIA A100-SXM4-80GB").fp8 and not find_gpu("Tesla T4").bf16


def topology(gpu_name: str, memory_gb: float):
    meta = {"gpu_name": gpu_name, "memory_gb": memory_gb}
    return topology_from_text(TWO_GPU_TEXT, f"test:{gpu_name}", meta, "test sidecar")


def test_topology_estimator_and_catalog_agree_on_one_part():
    topo = topology("NVIDIA B200", 180)
    part = find_gpu("NVIDIA B200")
    assert topo.pcie_gen == part.pcie_gen and topo.gpu(0).nvlink_total == part.nvlink_links
    assert gpu_rates("NVIDIA B200").dense_bf16_tflops == part.dense_bf16_tflops


def test_two_b200_predict_more_tokens_per_gpu_than_two_h100():
    request = PlanRequest(num_gpus=2)
    b200 = make_plan(topology("NVIDIA B200", find_gpu("NVIDIA B200").memory_gb), MISTRAL, request)
    h100 = make_plan(topology("NVIDIA H100 80GB HBM3", find_gpu("NVIDIA H100 80GB HBM3").memory_gb), MISTRAL, request)
    assert b200.estimate.tokens_per_s_per_gpu > 1.5 * h100.estimate.tokens_per_s_per_gpu
    # both parts are in the catalog (their speed is the H200 table scaled by it, which the plan says apart)
    assert not any("not in the GPU catalog" in w for w in b200.warnings + h100.warnings)


def test_unknown_gpu_is_named_in_plan_warnings_in_json_and_table(tmp_path: Path, capsys):
    (tmp_path / "box.txt").write_text(TWO_GPU_TEXT, encoding="utf-8")
    (tmp_path / "box.json").write_text(json.dumps({"gpu_name": "Acme Matrix 9000", "memory_gb": 150}))
    args = ["plan", "--model", "mistral-7b", "--topo-file", str(tmp_path / "box.txt"), "--num-gpus", "2"]
    assert main([*args, "--json"]) == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    unknown = [w for w in warnings if "'Acme Matrix 9000' is not in the GPU catalog" in w]
    assert any("100 TFLOP/s" in w for w in unknown), warnings
    assert main(args) == 0
    table = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert f"warning: {unknown[0]}" in table
