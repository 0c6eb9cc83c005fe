"""Tensor and context parallel in the plan (generator.plan.parallel): on the bundled machines, for Llama-3-70B and
Llama-3.1-8B at long context. Every number here is predicted; none has been measured on GPUs yet."""

from __future__ import annotations

import pytest

from generator.errors import UserError
from generator.model import load_model
from generator.plan.planner import make_plan
from generator.plan.types import PlanRequest
from generator.topology.islands import islands
from generator.topology.machines import load_machine


def _plan(machine: str, model: str, **kw):
    return make_plan(load_machine(machine), load_model(model), PlanRequest(**kw))


def _outcome(machine: str, model: str, **kw):
    """(plan, None) or (None, error text)."""
    try:
        return _plan(machine, model, **kw), None
    except UserError as e:
        return None, str(e)


def _inside_islands(machine: str, groups) -> bool:
    owners = {g: i for i, isl in enumerate(islands(load_machine(machine))) for g in isl}
    return all(len({owners[g] for g in group}) == 1 for group in groups)


def test_long_context_8b_lora_131k_on_hgx_uses_context_parallel_and_fits():
    plan = _plan("hgx-h200-8", "llama-3.1-8b", method="lora", seq_len=131072)
    assert plan.parallel is not None and plan.parallel.layout.cp > 1
    assert plan.estimate.fits and plan.strategy == "fsdp"
    assert "leanest data-parallel option" in plan.reasons[0] and "fits" in plan.reasons[0]
    w = plan.workload
    assert plan.global_batch == w.micro_batch * w.grad_accum * plan.parallel.layout.data_parallel


def test_no_data_parallel_plan_fits_the_131k_8b_lora_on_hgx():
    from dataclasses import replace

    from generator.estimate import estimate_all

    plan = _plan("hgx-h200-8", "llama-3.1-8b", method="lora", seq_len=131072)
    placement = plan.estimate  # the chosen row's budget is the one every strategy gets
    lean = replace(plan.workload, micro_batch=1, grad_checkpointing=True)
    from generator.estimate.types import Placement

    p = Placement(8, plan.gpu_name, 150.75, 339.0)
    rows = estimate_all(plan.model, lean, p)
    assert rows and not any(e.fits for e in rows)
    # far past the budget (more than twice it), not a rounding matter: context parallel is what makes it fit
    assert min(e.reserved_gb for e in rows) > 2 * placement.capacity_gb


@pytest.mark.parametrize("seq", [65536, 131072])
@pytest.mark.parametrize("method", ["full", "lora"])
def test_h200_nvl_never_puts_a_group_across_the_two_nvlink_groups(seq, method):
    plan, error = _outcome("h200-nvl-8", "llama-3.1-8b", method=method, seq_len=seq)
    text = error if plan is None else " ".join(plan.reasons)
    if plan is not None and plan.parallel is not None:
        assert _inside_islands("h200-nvl-8", plan.parallel.tp_groups + plan.parallel.cp_groups)
    if plan is None or plan.parallel is not None:
        assert "would cross SYS" in text  # the reasons say why the wider groups were refused


def test_h200_nvl_131k_8b_lora_is_refused_and_says_why():
    plan, error = _outcome("h200-nvl-8", "llama-3.1-8b", method="lora", seq_len=131072)
    assert plan is None
    assert "CP 8, FSDP over 8 not considered" in error and "would cross SYS between GPUs 0 and 4" in error
    assert "issue" not in error.lower()


@pytest.mark.parametrize("machine", ["hgx-h200-8", "h200-nvl-8"])
@pytest.mark.parametrize("method", ["full", "lora"])
def test_llama_70b_on_one_node(machine, method):
    plan, error = _outcome(machine, "llama-3-70b", method=method)
    if method == "full":  # 16 bytes/param over 8 GPUs is 140 GB before any activation: no layout changes that
        assert plan is None and "does not fit" in error
        return
    assert plan is not None and plan.estimate.fits
    if plan.parallel is not None:
        assert _inside_islands(machine, plan.parallel.tp_groups + plan.parallel.cp_groups)


@pytest.mark.parametrize("method", ["full", "lora"])
def test_llama_70b_on_two_hgx_nodes_keeps_groups_inside_each_node(method):
    plan, error = _outcome(
        "hgx-h200-8", "llama-3-70b", method=method, num_machines=2, main_process_ip="10.0.0.1", fabric=None
    )
    assert plan is not None, error
    assert plan.estimate.fits
    if plan.parallel is not None:
        lay = plan.parallel.layout
        assert lay.size == plan.num_processes == 16
        assert 8 % (lay.tp * lay.cp) == 0  # TP and CP groups never leave one machine
        assert any("faster" in r or "fits" in r for r in plan.reasons[:1])


def test_llama_70b_full_two_nodes_takes_tensor_parallel_inside_the_node():
    """Over 100G RoCE FSDP's gathers across the nodes cost more than TP 8 inside each node. (Over HDR and NDR
    InfiniBand the operator model priced from the measured H200 table puts them within 5%: each TP rank repeats the
    norms and residual adds on the whole hidden width, transformers' tp_plan having no sequence parallelism.)"""
    plan = _plan("hgx-h200-8", "llama-3-70b", method="full", num_machines=2, main_process_ip="10.0.0.1",
                 fabric="roce-100g")  # fmt: skip
    assert plan.parallel is not None and plan.parallel.layout.tp > 1
    assert _inside_islands("hgx-h200-8", plan.parallel.tp_groups)


def test_short_plans_stay_data_parallel():
    """The common case is unchanged: Mistral-7B at 4096 tokens plans plain data parallelism, no new reason lines."""
    for machine in ("hgx-h200-8", "h200-nvl-8", "h200-sxm-2"):
        plan = _plan(machine, "mistral-7b")
        assert plan.parallel is None
        assert not any("not considered:" in r and ("TP " in r or "CP " in r) for r in plan.reasons)


def test_qlora_and_forced_ddp_never_get_a_layout():
    for kw in ({"method": "qlora"}, {"strategy": "ddp", "method": "lora"}):
        plan, _ = _outcome("hgx-h200-8", "llama-3.1-8b", seq_len=8192, **kw)
        assert plan is None or plan.parallel is None


def test_planner_stays_fast():
    """A tensor/context-parallel search at 131k tokens on eight GPUs plans well under a second: 0.2-0.35 s of CPU a
    plan alone on a 2-core CPU machine. The best of three rounds is read: one round read 1.01 s inside a full xdist
    worker (2026-12-07), whose process time holds whatever else that process was doing."""
    import time

    def cpu_s_a_plan() -> float:
        start = time.process_time()
        _outcome("hgx-h200-8", "llama-3.1-8b", method="lora", seq_len=131072)
        _outcome("h200-nvl-8", "llama-3.1-8b", method="lora", seq_len=131072)
        return (time.process_time() - start) / 2

    assert min(cpu_s_a_plan() for _ in range(3)) < 1.0


def test_forced_sizes_are_taken_or_refused_in_one_line():
    plan = _plan("h200-nvl-8", "llama-3-70b", method="lora", tp_size=4)
    assert plan.parallel.layout.tp == 4 and "forced by --tp-size 4" in plan.reasons[0]
    assert _inside_islands("h200-nvl-8", plan.parallel.tp_groups)
    for kw, text in (
        ({"cp_size": 8}, "would cross SYS"),
        ({"tp_size": 8}, "nothing to shard across"),
        ({"tp_size": 0}, "at least 1"),
        ({"cp_size": 3}, "can run here"),
    ):
        with pytest.raises(UserError, match=text):
            _plan("h200-nvl-8", "llama-3-70b", method="lora", **kw)
    with pytest.raises(UserError, match="QLoRA"):
        _plan("hgx-h200-8", "llama-3.1-8b", method="qlora", cp_size=2)


def test_sizes_of_one_keep_the_plan_data_parallel():
    plan = _plan("hgx-h200-8", "llama-3-70b", method="lora", tp_size=1, cp_size=1)
    assert plan.parallel is None


def test_cp_is_refused_for_sliding_window_models():
    plan, error = _outcome("hgx-h200-8", "mistral-7b", method="lora", seq_len=32768)
    assert plan is None or plan.parallel is None or plan.parallel.layout.cp == 1
    with pytest.raises(UserError, match="window"):
        _plan("hgx-h200-8", "mistral-7b", method="lora", seq_len=32768, cp_size=2)


def test_a_measured_group_bandwidth_is_used_for_that_group():
    measured = {frozenset(range(8)): 123.0}
    plan = make_plan(
        load_machine("hgx-h200-8"), load_model("llama-3.1-8b"), PlanRequest(method="lora", seq_len=131072), measured
    )
    assert plan.parallel.layout.cp_busbw_gbps == 123.0
