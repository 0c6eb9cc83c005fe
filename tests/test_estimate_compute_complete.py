"""A partial compute file (`probe --compute --quick`, a probe its time box cut) completed from the shipped table
(generator/estimate/compute_complete.py): it prices a step as the full file would, and the plan says what it took."""

import copy
from dataclasses import replace

import pytest

from generator.estimate import Placement, Workload, estimate
from generator.estimate.compute_complete import completed
from generator.estimate.compute_source import table_for
from generator.estimate.compute_table import from_document
from generator.estimate.compute_time import compute_time
from generator.model import load_model
from tests.test_estimate_operators import _doc, _slower

ONE = Placement(num_gpus_per_machine=1, gpu_name="NVIDIA H200", gpu_memory_gb=150.75, busbw_gbps=0)
QUICK_TOKENS = 8192
"""The one token count `--quick` times GEMMs at (generator/probe/compute_grid.CUDA_TOKENS_QUICK)."""


def _full(factor: float) -> dict:
    """The shipped table as a GPU `factor` times slower would measure it, everything probed."""
    return _slower(_doc(), factor)


def _quick(doc: dict) -> dict:
    """What --quick keeps of a full file: GEMMs at one token count, SDPA at two lengths, no flex, host or layers."""
    doc = copy.deepcopy(doc)

    def tokens(r: dict) -> int:  # the GEMM's token dimension: m, but k in the weight gradient (dY^T @ X)
        return r["k"] if r["op"] == "wgrad" else r["m"]

    doc["gemm"] = {d: [r for r in rows if tokens(r) == QUICK_TOKENS] for d, rows in doc["gemm"].items()}
    doc["attention"] = [r for r in doc["attention"] if r["path"] != "flex" and r["seq"] in (4096, 16384)]
    doc["host"], doc["layers"] = [], []
    return doc


WORKLOADS = [
    ("qwen2.5-7b", Workload(method="lora", seq_len=2048, micro_batch=1, precision="bf16")),
    ("mistral-7b", Workload(method="full", seq_len=4096, micro_batch=1, grad_checkpointing=True)),
    ("mistral-7b", Workload(method="lora", seq_len=8192, micro_batch=2, attention="flex", doc_tokens=1024)),
    ("llama-3-8b", Workload(method="lora", seq_len=8192, micro_batch=2, precision="fp8")),
    ("mixtral-8x7b", Workload(method="qlora", seq_len=4096, micro_batch=8, grad_checkpointing=True)),
]


@pytest.mark.parametrize(("name", "workload"), WORKLOADS)
def test_a_quick_file_completed_prices_a_step_as_the_full_file_does(name, workload):
    model = load_model(name)
    full = table_for("NVIDIA H200", from_document(_full(1.3), "full.json"))
    quick_raw = from_document(_quick(_full(1.3)), "quick.json")
    quick = table_for("NVIDIA H200", quick_raw)
    want = compute_time(full, model, workload, "ddp").total_s
    assert compute_time(quick, model, workload, "ddp").total_s == pytest.approx(want, rel=0.04)
    if workload.seq_len * workload.micro_batch < QUICK_TOKENS:  # below --quick's one token count, uncompleted
        raw, whole = (compute_time(t, model, workload, "ddp").gemm_s for t in (quick_raw, full))
        assert raw > 1.5 * whole


def test_the_plan_says_what_a_quick_file_left_to_the_shipped_table():
    quick = from_document(_quick(_full(1.3)), "quick.json")
    e = estimate(load_model("mistral-7b"), Workload(method="lora"), replace(ONE, compute=quick), "ddp")
    (note,) = [n for n in e.notes if n.startswith("speed: ")]
    assert "quick.json" in note and "host rows" in note and "flex attention" in note and "GEMM shapes" in note


def test_a_full_file_is_read_as_it_measured():
    doc = _full(1.3)
    user = from_document(doc, "full.json")
    table = table_for("NVIDIA H200", user)
    assert table.gemm == user.gemm and table.attention == user.attention and table.host == user.host
    assert not {"GEMM shapes", "flex attention"} & set(table.filled)
    assert not any(f.startswith("host rows") for f in table.filled)


def test_a_gpu_without_float8_gets_no_float8_rows_from_the_reference():
    doc = _quick(_full(1.3))
    doc["gemm"] = {d: rows for d, rows in doc["gemm"].items() if d != "fp8"}
    doc["fp8_cast"] = []
    user = from_document(doc, "no-fp8.json")
    table = completed(user, table_for("NVIDIA H200"))
    assert not any(dtype == "fp8" for dtype, _ in table.gemm) and not table.cast_ns_per_elem
    assert "float8 casts" not in table.filled
