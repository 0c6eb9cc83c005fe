"""A named model's own host rows on a real GPU (needs CUDA, skipped else; bench/gpu_tests.sh runs it on the device):
Mixtral's layer, its structure at the probe's tiny widths, timed beside the Mistral layer on the same machine, in the
ratio of the ops the two layers dispatch as counted at sizing (generator/model/op_count.py), and the rows carry the key
the planner looks Mixtral up by."""

from __future__ import annotations

from dataclasses import replace

import pytest

from generator.estimate.host_time import host_scale, model_host_tables, model_key
from generator.model import load_model
from tests.cuda_mark import needs_cuda

pytestmark = [pytest.mark.slow, needs_cuda]

MIXTRAL_ADAPTERS = 4
"""q/k/v/o_proj: Mixtral's experts are not nn.Linear, so train.py's default targets adapt four projections a layer
where the Mistral row's adapt seven."""


def test_mixtrals_own_lora_layer_follows_its_counted_ops():
    """The router, top-k, sort, gathers and scatters add ops, and three fewer adapters take more away: counted at
    sizing Mixtral's LoRA layer issues 0.95x the Mistral layer's forward ops and 0.87x its backward's. This test said
    "more host work than Mistral's" until one H200 read 6.9 ms against 7.1 (2026-12-05, gpu-tests-h200-x1-2026-12-05-b
    .log): the count said fewer. Each machine's host rows are noisy (one machine read one row 5.8 and 7.2 ms minutes
    apart), and on an H100's host the count priced six families' own rows 11.5% from their time on average, 27% at
    worst (h100-x1-gpu-host-ops-2026-12-05.json): the measured ratio must stay within 30% of the counted one."""
    pytest.importorskip("peft")
    from generator.model.meta import meta_counts
    from generator.probe.clock import Clock
    from generator.probe.compute_host import hf_row
    from generator.probe.compute_host_model import own_host_rows
    from generator.probe.compute_layers import hf_config_dict

    clock = Clock.for_device("cuda")
    mixtral = load_model("mixtral-8x7b")
    rows = own_host_rows(clock, mixtral, budget_s=120.0, compiled=False, rounds=6)
    assert {r["variant"] for r in rows} == {"lora", "full"}, clock.skipped
    own = model_host_tables(rows)[model_key(mixtral)][0][("lora", False, False)]
    mistral = hf_row(clock, "lora", compiled=False, rounds=6)
    fwd, fwdbwd = mistral["fwd_ms_per_layer"], mistral["fwdbwd_ms_per_layer"]
    counted = replace(mixtral, layer_ops=meta_counts(hf_config_dict("mixtral-8x7b")).ops)
    f, b = host_scale(counted, "lora", MIXTRAL_ADAPTERS, dropout=False)
    predicted = (f * fwd + b * (fwdbwd - fwd)) / fwdbwd
    measured = sum(own) * 1e3 / fwdbwd
    assert abs(measured / predicted - 1) < 0.30, (measured, predicted)


@pytest.mark.xfail(reason="illegal memory access on an H100, 2026-12-05 (torch 2.11+cu130, transformers 5.17; "
                   "it passed on an H200 the same day): bench/scripts/moe_host_debug.py. Here it runs after Mixtral's "
                   "rows in one process, and failed so on an H100 again on 2026-12-06, where alone in a process "
                   "(host_rows.py --models-only) all six of its rows ran: h100-x1-host-rows-qwen3-own-2026-12-06",
                   strict=False)  # fmt: skip
def test_qwen3_moes_own_layer_rows_run():
    """128 experts at top-8 over the probe's 64 tokens (most experts empty), where Mixtral's 8 at top-2 run."""
    pytest.importorskip("peft")
    from pathlib import Path

    from generator.probe.clock import Clock
    from generator.probe.compute_host_model import own_host_rows

    clock = Clock.for_device("cuda")
    qwen3 = load_model(str(Path(__file__).resolve().parents[1] / "bench" / "models" / "qwen3-30b-a3b.json"))
    rows = own_host_rows(clock, qwen3, budget_s=120.0, compiled=False, rounds=4)
    assert {r["variant"] for r in rows} == {"lora", "full"}, clock.skipped
