"""Properties every plan keeps, over random requests on the bundled reference machines (real engines)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import example, given, settings
from hypothesis import strategies as st

from generator.errors import UserError
from generator.model import load_model
from generator.plan.planner import make_plan
from generator.plan.types import PlanRequest
from generator.topology import REFERENCE_MACHINES, load_topology

MODEL = load_model("mistral-7b")
TOPOLOGIES = {name: load_topology(machine=name) for name in REFERENCE_MACHINES}

requests = st.builds(
    PlanRequest,
    method=st.sampled_from(["full", "lora", "qlora"]),
    seq_len=st.sampled_from([512, 2048, 4096, 8192]),
    micro_batch=st.sampled_from([None, 1, 2]),
    global_batch=st.sampled_from([None, 16, 32, 64]),
    grad_checkpointing=st.sampled_from(["auto", "on", "off"]),
    allow_offload=st.booleans(),
    headroom=st.sampled_from([0.0, 0.1, 0.2]),
    load_dtype=st.sampled_from(["fp32", "bf16"]),
)


@settings(max_examples=40, deadline=None)
@given(machine=st.sampled_from(sorted(REFERENCE_MACHINES)), request=requests, exclude_first=st.booleans())
# found by CI: a short full fine-tune on eight GPUs takes TP, whose ranks share one sample
@example(machine="hgx-h200-8", request=PlanRequest(method="full", seq_len=512, global_batch=16), exclude_first=False)
def test_a_plan_fits_uses_free_gpus_and_keeps_the_global_batch(machine, request, exclude_first):
    topo = TOPOLOGIES[machine]
    if exclude_first:
        request = replace(request, exclude=(topo.indices[0],))
    try:
        plan = make_plan(topo, MODEL, request)
    except UserError as exc:
        assert "\n" not in str(exc) and str(exc)
        return
    assert plan.estimate.fits and plan.estimate.reserved_gb <= plan.estimate.capacity_gb
    assert set(plan.gpu_ids) <= set(topo.indices) - set(request.exclude)
    assert len(set(plan.gpu_ids)) == len(plan.gpu_ids) == plan.num_processes
    w = plan.workload
    # tensor / context parallel ranks share one sample: the batch is split over the data-parallel ranks only
    dp = plan.parallel.layout.data_parallel if plan.parallel is not None else plan.num_processes
    assert plan.global_batch == w.micro_batch * w.grad_accum * dp
    if request.global_batch is not None:
        assert plan.global_batch == request.global_batch
    if request.micro_batch is not None:
        assert w.micro_batch == request.micro_batch
    if request.grad_checkpointing != "auto":
        assert w.grad_checkpointing == (request.grad_checkpointing == "on")
    if not request.allow_offload:
        assert not plan.strategy.endswith("_offload")
    if plan.strategy == "hsdp":
        assert plan.hsdp_replicate * plan.hsdp_shard == plan.num_processes and plan.hsdp_replicate > 1
