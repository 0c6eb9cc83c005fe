"""A strategy named with --strategy: the reasons compare it only with options that fit, quote numbers that are in the
table (or say where they come from), and say what forcing it changed (issue 19 item 4). Real estimator, bundled
h200-nvl-8 (two NVLink islands of four)."""

from __future__ import annotations

import re

import pytest

from generator.model import load_model
from generator.plan.planner import make_plan
from generator.plan.policy import TIE_TOLERANCE
from generator.plan.types import PlanRequest
from generator.topology import load_topology

MODEL = load_model("mistral-7b")
TOPO = load_topology(machine="h200-nvl-8")


def plan(**kw):
    return make_plan(TOPO, MODEL, PlanRequest(**kw))


@pytest.mark.parametrize("kw", [dict(strategy="ddp", num_gpus=8), dict(strategy="zero2"), dict()])
def test_other_strategy_lines_quote_the_table_and_never_call_a_faster_one_a_tie(kw):
    p = plan(**kw)
    table = {e.strategy: e for e in p.estimates}
    mine = p.estimate.tokens_per_s_per_gpu
    compared = 0
    for reason in p.reasons:
        m = re.match(r"(\w+) fits \(([\d.]+) GB\)", reason)
        if not m:
            continue
        compared += 1
        other = table[m.group(1)]
        assert other.fits and f"{other.reserved_gb:.1f}" == m.group(2), reason
        ratio = other.tokens_per_s_per_gpu / mine
        if "ties on speed" in reason:
            assert min(ratio, 1 / ratio) >= 1 - TIE_TOLERANCE, reason
        elif "faster" in reason:
            assert ratio > 1 / (1 - TIE_TOLERANCE) and f"{ratio - 1:.0%} faster" in reason, reason
        else:
            assert ratio < 1 - TIE_TOLERANCE and f"{1 - ratio:.0%} slower" in reason, reason
        assert "on a tie" not in reason or (p.estimate.fits and "strategy" not in kw), reason
    assert compared
    if "strategy" in kw:  # a forced choice that does not fit is not a baseline to subtract from
        assert not any(re.search(r"-\d+(\.\d)? GB per GPU", r) for r in p.reasons)


def test_forced_ddp_that_does_not_fit_says_the_sharded_strategies_are_faster_not_tied():
    p = plan(strategy="ddp", num_gpus=8, compile_layers=False)  # eager: compiled, DDP fits (test_plan_cli)
    assert p.forced
    line = next(r for r in p.reasons if r.startswith("hsdp fits"))
    assert "faster" in line and "tie" not in line


def test_forced_ddp_says_why_it_moved_from_eight_gpus_to_one_and_what_the_batch_became():
    auto, p = plan(), plan(strategy="ddp", compile_layers=False)  # eager: compiled, DDP fits on 8 (test_plan_cli)
    assert (auto.num_processes, p.num_processes) == (8, 1)  # the change the issue found silent
    count = next(r for r in p.reasons if r.startswith("ddp on 1 GPU where auto's hsdp uses 8"))
    two_gpus = plan(strategy="ddp", num_gpus=2, micro_batch=1, grad_checkpointing="on", compile_layers=False)
    assert "on 2 GPUs even its leanest setting" in count and f"needs {two_gpus.estimate.reserved_gb:.1f} GB" in count
    batch = next(r for r in p.reasons if r.startswith(f"micro-batch {p.workload.micro_batch},"))
    assert f"where auto's plan has micro-batch {auto.workload.micro_batch}" in batch
    assert f"--global-batch {auto.global_batch} keeps auto's" in batch


def test_what_auto_would_pick_quotes_its_own_numbers_and_says_they_are_not_in_the_table():
    auto, p = plan(), plan(strategy="ddp", num_gpus=8)
    line = next(r for r in p.reasons if r.startswith("you asked for ddp; --strategy auto would pick hsdp on 8 GPUs"))
    a = auto.estimate
    assert f"{a.tokens_per_s_per_gpu:,.0f} tokens/s per GPU" in line and f"{a.reserved_gb:.1f} GB per GPU" in line
    assert f"micro-batch {auto.workload.micro_batch}," in line
    in_table = {f"{e.reserved_gb:.1f}" for e in p.estimates}
    assert f"{a.reserved_gb:.1f}" not in in_table and "not in the table above" in line
