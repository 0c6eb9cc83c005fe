"""A named model's own host rows on a real GPU (needs CUDA, skipped else; bench/gpu_tests.sh runs it on the device):
Mixtral's layer, its structure at the probe's tiny widths, issues the router, top-k, sort, gathers and scatters on
top of a dense layer's kernels, so its host time a layer is above the Mistral layer's timed the same way on the same
machine, and the rows carry the key the planner looks Mixtral up by."""

from __future__ import annotations

import pytest

from generator.estimate.host_time import model_host_tables, model_key
from generator.model import load_model
from tests.cuda_mark import needs_cuda

pytestmark = [pytest.mark.slow, needs_cuda]


def test_mixtrals_own_layer_issues_more_host_work_than_mistrals():
    pytest.importorskip("peft")
    from generator.probe.compute_bench import Clock
    from generator.probe.compute_host import hf_row
    from generator.probe.compute_host_model import own_host_rows

    clock = Clock.for_device("cuda")
    mixtral = load_model("mixtral-8x7b")
    rows = own_host_rows(clock, mixtral, budget_s=120.0, compiled=False, rounds=6)
    assert {r["variant"] for r in rows} == {"lora", "full"}, clock.skipped
    own = model_host_tables(rows)[model_key(mixtral)][0][("lora", False, False)]
    mistral = hf_row(clock, "lora", compiled=False, rounds=6)
    assert sum(own) * 1e3 > mistral["fwdbwd_ms_per_layer"]


@pytest.mark.xfail(reason="illegal memory access on an H100, 2026-12-05 (torch 2.11+cu130, transformers 5.17): "
                   "bench/scripts/moe_host_debug.py narrows it", strict=False)  # fmt: skip
def test_qwen3_moes_own_layer_rows_run():
    """128 experts at top-8 over the probe's 64 tokens (most experts empty), where Mixtral's 8 at top-2 run."""
    pytest.importorskip("peft")
    from pathlib import Path

    from generator.probe.compute_bench import Clock
    from generator.probe.compute_host_model import own_host_rows

    clock = Clock.for_device("cuda")
    qwen3 = load_model(str(Path(__file__).resolve().parents[1] / "bench" / "models" / "qwen3-30b-a3b.json"))
    rows = own_host_rows(clock, qwen3, budget_s=120.0, compiled=False, rounds=4)
    assert {r["variant"] for r in rows} == {"lora", "full"}, clock.skipped
