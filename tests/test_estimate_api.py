"""Applicability, estimate_all, the GPU table, JSON/table rendering and checkpoint size."""

import pytest
from rich.console import Console

from generator.estimate import (
    STRATEGIES,
    Placement,
    Workload,
    applicable,
    checkpoint_size_gb,
    estimate,
    estimate_all,
    gpu_peak_tflops,
)
from generator.model import load_model
from generator.ui.estimates import estimate_to_dict, render_estimates

MISTRAL = load_model("mistral-7b")
ONE = Placement(num_gpus_per_machine=1, gpu_name="NVIDIA H200", gpu_memory_gb=141, busbw_gbps=0)
FOUR = Placement(num_gpus_per_machine=4, gpu_name="NVIDIA H200", gpu_memory_gb=141, busbw_gbps=370)


@pytest.mark.parametrize(
    ("name", "tflops"),
    [
        ("NVIDIA H200", 989.4),
        ("NVIDIA H100 80GB HBM3", 989.4),
        ("NVIDIA H200 NVL", 835.5),
        ("NVIDIA H100 PCIe", 756.5),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA L40S", 362.05),
        ("NVIDIA L40", 181.05),
        ("NVIDIA GeForce RTX 4090", 165.2),
        ("Tesla V100-SXM2-32GB", 125.0),
    ],
)
def test_gpu_peak_table(name, tflops):
    assert gpu_peak_tflops(name) == tflops


def test_unknown_gpu_is_noted():
    p = Placement(num_gpus_per_machine=1, gpu_name="Mystery GPU", gpu_memory_gb=80, busbw_gbps=0)
    e = estimate(MISTRAL, Workload(method="lora"), p, "ddp")
    assert any("not in the GPU catalog" in n for n in e.notes)


def test_one_gpu_strategies():
    names = [e.strategy for e in estimate_all(MISTRAL, Workload(), ONE)]
    assert names == ["ddp", "zero2", "zero2_offload", "zero3_offload", "fsdp"]
    assert "one GPU" in applicable("zero3", Workload(), ONE)
    assert applicable("hsdp", Workload(), ONE) is not None


def test_hsdp_needs_two_shard_groups():
    assert "two shard groups" in applicable("hsdp", Workload(), FOUR)
    split = Placement(
        num_gpus_per_machine=4,
        gpu_name="NVIDIA H200",
        gpu_memory_gb=141,
        busbw_gbps=35,
        shard_size=2,
        shard_busbw_gbps=322,
    )
    assert applicable("hsdp", Workload(), split) is None
    odd = Placement(num_gpus_per_machine=6, gpu_name="NVIDIA H200", gpu_memory_gb=141, busbw_gbps=35, shard_size=4)
    assert "divide" in applicable("hsdp", Workload(), odd)


def test_qlora_and_unknown_names():
    assert applicable("fsdp", Workload(method="qlora"), FOUR) is not None
    assert applicable("ddp", Workload(method="qlora"), FOUR) is None
    assert "unknown strategy" in applicable("zero4", Workload(), FOUR)


def test_estimate_all_respects_given_order_and_skips():
    names = [e.strategy for e in estimate_all(MISTRAL, Workload(), FOUR)]
    assert names == [s for s in STRATEGIES if s != "hsdp"]
    assert [e.strategy for e in estimate_all(MISTRAL, Workload(), FOUR, ("fsdp", "ddp"))] == ["fsdp", "ddp"]


def test_headroom_decides_fit():
    e_loose = estimate(MISTRAL, Workload(), FOUR, "zero1", headroom=0.0)
    e_tight = estimate(MISTRAL, Workload(), FOUR, "zero1", headroom=0.6)
    assert e_loose.fits and not e_tight.fits
    assert e_tight.capacity_gb < e_loose.capacity_gb


def test_estimate_to_dict_fields():
    d = estimate_to_dict(estimate(MISTRAL, Workload(), FOUR, "fsdp"))
    for key in (
        "strategy",
        "fits",
        "peak_gb",
        "reserved_gb",
        "breakdown",
        "comm_gb_per_step",
        "comm_s",
        "compute_s",
        "step_s",
        "tokens_per_s_per_gpu",
        "mfu",
        "cpu_gb",
        "notes",
    ):
        assert key in d
    assert sum(d["breakdown"].values()) == pytest.approx(d["peak_gb"], abs=0.02)
    assert isinstance(d["notes"], list) and isinstance(d["fits"], bool)


def test_render_table_has_one_row_per_strategy():
    es = estimate_all(MISTRAL, Workload(), FOUR)
    table = render_estimates(es, "Mistral-7B on 4 x H200", highlight="zero3")
    assert table.row_count == len(es)
    console = Console(width=200, record=True)
    console.print(table)
    text = console.export_text()
    assert "zero3_offload" in text and "Mistral-7B on 4 x H200" in text


def test_checkpoint_size():
    psi = MISTRAL.params_total
    assert checkpoint_size_gb(MISTRAL, Workload(), "fsdp") == pytest.approx(12 * psi / 1e9)
    assert checkpoint_size_gb(MISTRAL, Workload(), "zero3") == pytest.approx(14 * psi / 1e9)
    assert checkpoint_size_gb(MISTRAL, Workload(load_dtype="bf16"), "ddp") == pytest.approx(6 * psi / 1e9)
    assert checkpoint_size_gb(MISTRAL, Workload(method="lora"), "ddp") < 1


def test_missing_bandwidth_stays_valid_json():
    import json

    p = Placement(num_gpus_per_machine=2, gpu_name="NVIDIA H200", gpu_memory_gb=141, busbw_gbps=0)
    e = estimate(MISTRAL, Workload(), p, "fsdp")
    d = estimate_to_dict(e)
    assert d["step_s"] is None and d["tokens_per_s_per_gpu"] == 0.0
    assert any("bandwidth" in n for n in d["notes"])
    json.loads(json.dumps(d, allow_nan=False))
