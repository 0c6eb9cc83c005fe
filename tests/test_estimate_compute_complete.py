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
from generator.estimate.host_time import host_layer_s, host_step_s
from generator.model import load_model
from tests.test_estimate_operators import _doc, _host_row, _slower

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


def _eager_host_only(factor: float) -> dict:
    """A full file whose host rows are the eager ones only (what the probe times), `factor` times the shipped's."""
    doc = _full(1.3)
    doc["host"] = [dict(r) for r in doc["host"] if not r["compiled"] and not r.get("liger")]
    for r in doc["host"]:
        for k in ("fwd_ms_per_layer", "fwdbwd_ms_per_layer", "step_ms"):
            r[k] *= factor
    return doc


LEVERS = [(v, c, lig) for v in ("full", "lora") for c, lig in ((False, False), (True, False), (False, True))]


def test_host_rows_the_file_did_not_time_take_this_cpus_ratio_to_the_reference():
    ref = table_for("NVIDIA H200")
    user = from_document(_eager_host_only(1.5), "eager-host.json")
    table = completed(user, ref)
    for lever in LEVERS:
        if lever[1] or lever[2]:
            want = tuple(1.5 * x for x in host_layer_s(ref, *lever))
            assert host_layer_s(table, *lever) == pytest.approx(want)
            assert host_step_s(table, *lever) == pytest.approx(1.5 * host_step_s(ref, *lever))
            assert host_layer_s(table, *lever) != host_layer_s(table, lever[0], False)  # its own row, not the eager
        else:
            assert host_layer_s(table, *lever) == user.host[lever]
            assert host_step_s(table, *lever) == user.host_step[lever]
    assert "host rows of other levers (scaled by this CPU's measured ratio)" in table.filled


def test_a_file_without_host_rows_takes_the_references_as_they_are():
    ref = table_for("NVIDIA H200")
    table = completed(from_document(_quick(_full(1.3)), "quick.json"), ref)
    for lever in LEVERS:
        assert host_layer_s(table, *lever) == host_layer_s(ref, *lever) != (0.0, 0.0)
        assert host_step_s(table, *lever) == host_step_s(ref, *lever) > 0
    assert "host rows (the CPU's: as measured with the reference)" in table.filled


def test_host_rows_timed_at_zero_give_no_ratio_and_the_others_are_taken_as_they_are():
    doc = _full(1.3)
    doc["host"] = [_host_row("lora", False, 0.0, 0.0)]  # the depths' difference drowned in noise
    ref = table_for("NVIDIA H200")
    table = completed(from_document(doc, "zero-host.json"), ref)
    assert host_layer_s(table, "lora", False) == (0.0, 0.0)
    assert host_layer_s(table, "full", True) == host_layer_s(ref, "full", True)
    assert "host rows of other levers (the CPU's: as measured with the reference)" in table.filled
