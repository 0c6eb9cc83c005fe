"""The planner's choices, driven by a small fake estimator and topology so each rule can be pinned exactly."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from generator.errors import UserError
from generator.estimate.types import STRATEGIES, Estimate
from generator.model.types import ModelSpec
from generator.plan.engines import Engines
from generator.plan.planner import make_plan
from generator.plan.types import PlanRequest
from generator.topology.types import Gpu, Link, Topology

MODEL = ModelSpec(
    name="toy-7b", model_type="mistral", hidden_size=4096, num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128,
    intermediate_size=14336, vocab_size=32000, tie_embeddings=False, max_seq_len=32768,
    decoder_layer_cls="MistralDecoderLayer", params_total=7_000_000_000, params_per_layer=200_000_000,
    params_embedding=131_000_000, largest_layer_params=131_000_000, matmul_params_active=7_000_000_000,
)  # fmt: skip


def topo(n=8, island=4, mem=80.0) -> Topology:
    """n GPUs in NVLink islands of `island` consecutive ids; PCIe between islands."""
    gpus = tuple(Gpu(i, "Fake GPU", mem) for i in range(n))
    links = {
        (i, j): Link("NV", 6, 300.0) if i // island == j // island else Link("SYS", 0, 40.0)
        for i in range(n)
        for j in range(i + 1, n)
    }
    return Topology(gpus, links, "machine:fake")


def fake_engines(island=4, speed=None) -> Engines:
    """Memory: bytes/param per strategy over the shard group + activations; time: FLOPs / rate + bytes / busbw."""

    def busbw(t, ids):
        ids = list(ids)
        if len(ids) < 2:
            return 0.0
        return 300.0 if len({i // island for i in ids}) == 1 else 40.0

    def best_subset(t, k, exclude=()):
        free = [i for i in t.indices if i not in exclude]
        groups = {}
        for i in free:
            groups.setdefault(i // island, []).append(i)
        fitting = [g for g in groups.values() if len(g) >= k]
        ids = fitting[0][:k] if fitting else free[:k]
        return SimpleNamespace(gpu_ids=tuple(ids), busbw_gbps=busbw(t, ids), spans_islands=not fitting, reason="fake")

    def order_for_hsdp(t, ids):
        ids = sorted(ids)
        sizes = {}
        for i in ids:
            sizes[i // island] = sizes.get(i // island, 0) + 1
        return tuple(ids), min(sizes.values())

    def applicable(s, w, p):
        if s == "hsdp" and (p.shard_size or p.num_gpus_per_machine) >= p.num_gpus:
            return "needs more than one shard group"
        if p.num_gpus == 1 and s != "ddp":
            return "one GPU"
        return None

    def estimate_all(model, w, p, strategies=STRATEGIES, headroom=0.10):
        out = []
        n, N = p.num_gpus, model.params_total
        shard = p.shard_size or n
        per_param = {
            "ddp": 10 if w.load_dtype == "bf16" else 18, "zero1": 4 + 12 / n, "zero2": 2 + 14 / n, "zero3": 16 / n,
            "fsdp": 16 / n, "fsdp_grad_op": 2 + 16 / n, "hsdp": 16 / shard, "zero2_offload": 4, "zero3_offload": 0.5,
        }  # fmt: skip
        comm_factor = {"zero3": 1.5, "fsdp": 1.5, "zero3_offload": 1.5}
        for s in strategies:
            states = per_param[s] * N / 1e9 if w.method == "full" else (2.0 if w.method == "lora" else 0.6) * N / 1e9
            act = w.seq_len * w.micro_batch * (0.0005 if w.grad_checkpointing else 0.004)
            reserved = states + act
            cap = p.gpu_memory_gb * (1 - headroom)
            tokens = w.seq_len * w.micro_batch * w.grad_accum
            compute = tokens * 6 * N * (4 / 3 if w.grad_checkpointing else 1) / 400e12
            comm_gb = 2 * N / 1e9 * comm_factor.get(s, 1.0) if n > 1 else 0.0
            bw = p.busbw_gbps if s != "hsdp" else (p.shard_busbw_gbps or p.busbw_gbps) * 2
            comm = comm_gb / bw if comm_gb else 0.0
            step = max(compute, comm) * (speed or {}).get(s, 1.0)
            out.append(
                Estimate(s, reserved <= cap, reserved * 0.95, reserved, {"all": reserved * 0.95}, cap, comm_gb, comm,
                         compute, step, tokens / step, 0.4)
            )  # fmt: skip
        return out

    return Engines(estimate_all, applicable, best_subset, order_for_hsdp, busbw)


def plan(request=None, t=None, **kw):
    return make_plan(t or topo(), MODEL, request or PlanRequest(), engines=kw.pop("engines", fake_engines()), **kw)


def test_requested_count_stays_inside_one_island():
    p = plan(PlanRequest(num_gpus=4))
    assert p.gpu_ids == (0, 1, 2, 3)
    assert p.num_processes == 4
    assert p.strategy in ("zero3", "fsdp", "zero2", "fsdp_grad_op", "zero1")


def test_excluded_gpus_are_never_used():
    p = plan(PlanRequest(num_gpus=4, exclude=(0,)))
    assert p.gpu_ids == (4, 5, 6, 7)


def test_as_many_as_help_skips_gpus_that_add_under_five_percent():
    # Crossing islands costs so much that 8 GPUs are no faster than 4: keep 4 and leave the rest free.
    p = plan(PlanRequest(seq_len=512, micro_batch=1, strategy="fsdp"))
    assert len(p.gpu_ids) == 4
    assert any("by GPU count" in r and "rest stay free" in r for r in p.reasons)


def test_as_many_as_help_uses_all_gpus_when_they_help():
    p = plan(PlanRequest(seq_len=8192), t=topo(island=8), engines=fake_engines(island=8))
    assert p.gpu_ids == tuple(range(8))


def test_checkpointing_off_when_it_fits_and_on_when_it_must_be():
    roomy = plan(PlanRequest(num_gpus=4, seq_len=1024, micro_batch=1))
    assert roomy.workload.grad_checkpointing is False
    tight = plan(PlanRequest(num_gpus=4, seq_len=16384, micro_batch=1))
    assert tight.workload.grad_checkpointing is True
    assert any("activation checkpointing on: without it" in r for r in tight.reasons)


def test_largest_micro_batch_that_fits_is_picked():
    p = plan(PlanRequest(num_gpus=4, seq_len=4096, grad_checkpointing="on"))
    assert p.workload.micro_batch == 8
    tighter = plan(PlanRequest(num_gpus=4, seq_len=4096 * 4, grad_checkpointing="on"))
    assert tighter.workload.micro_batch < 8


def test_global_batch_is_kept_with_accumulation():
    p = plan(PlanRequest(num_gpus=4, micro_batch=2, global_batch=64))
    assert (p.workload.micro_batch, p.workload.grad_accum, p.global_batch) == (2, 8, 64)
    assert p.workload.micro_batch * p.workload.grad_accum * p.num_processes == 64


def test_global_batch_that_does_not_split_is_an_error_with_suggestions():
    with pytest.raises(UserError, match=r"global batch 30 is not a multiple of micro-batch 4 x 4 GPUs = 16.*16 or 32"):
        plan(PlanRequest(num_gpus=4, micro_batch=4, global_batch=30))


def test_forced_strategy_that_does_not_fit_is_marked_forced():
    p = plan(PlanRequest(num_gpus=4, strategy="ddp"))
    assert p.strategy == "ddp" and p.forced
    assert any("does not fit" in w for w in p.warnings)


def test_forced_strategy_that_fits_is_not_forced_and_says_what_auto_would_pick():
    p = plan(PlanRequest(num_gpus=4, strategy="zero2"))
    assert p.strategy == "zero2" and not p.forced
    auto = plan(PlanRequest(num_gpus=4))
    assert auto.strategy != "zero2"
    assert any(r.startswith(f"you asked for zero2; --strategy auto would pick {auto.strategy}") for r in p.reasons)


def test_offload_needs_permission():
    t = topo(n=2, island=2, mem=24.0)
    with pytest.raises(UserError) as err:
        plan(PlanRequest(), t=t, engines=fake_engines(island=2))
    msg = str(err.value)
    assert "\n" not in msg
    assert "does not fit" in msg and "--method lora" in msg and "--method qlora" in msg and "--allow-offload" in msg
    p = plan(PlanRequest(allow_offload=True), t=t, engines=fake_engines(island=2))
    assert p.strategy.endswith("_offload")


def test_hsdp_across_islands_orders_ids_and_sizes_groups():
    p = plan(PlanRequest(num_gpus=8, strategy="hsdp"))
    assert p.strategy == "hsdp" and (p.hsdp_replicate, p.hsdp_shard) == (2, 4)
    assert p.gpu_ids == tuple(range(8))


def test_multi_node_uses_fabric_and_warns_when_bandwidth_unknown():
    p = plan(PlanRequest(num_gpus=4, num_machines=2, main_process_ip="10.0.0.1"))
    assert p.num_processes == 8 and p.num_machines == 2
    assert any("inter-node bandwidth unknown" in w for w in p.warnings)
    q = plan(PlanRequest(num_gpus=4, num_machines=2, main_process_ip="10.0.0.1", fabric="ib-ndr-x8"))
    assert not any("inter-node" in w for w in q.warnings)
    assert any("--fabric ib-ndr-x8" in r for r in q.reasons)


def test_measured_bandwidth_overrides_the_table():
    slow_pair = {frozenset({0, 1}): 5.0, frozenset({4, 5}): 250.0}
    p = plan(PlanRequest(num_gpus=2, seq_len=512), bandwidth=slow_pair)
    assert p.gpu_ids == (4, 5)
    assert any("measured" in r for r in p.reasons)


@pytest.mark.parametrize(
    "bad, match",
    [
        (PlanRequest(method="full-ish"), "--method"),
        (PlanRequest(strategy="zero4"), "--strategy"),
        (PlanRequest(num_gpus=9), "only 8 are free"),
        (PlanRequest(exclude=(11,)), "--exclude names GPU"),
        (PlanRequest(headroom=1.5), "--headroom"),
        (PlanRequest(num_machines=2, machine_rank=2), "--machine-rank"),
        (PlanRequest(seq_len=0), "--seq-len"),
    ],
)
def test_bad_requests_fail_with_one_line(bad, match):
    with pytest.raises(UserError, match=match):
        plan(bad)


def test_every_plan_is_internally_consistent():
    for req in (
        PlanRequest(),
        PlanRequest(num_gpus=2),
        PlanRequest(method="lora"),
        replace(PlanRequest(), seq_len=512),
    ):
        p = plan(req)
        assert p.estimate in p.estimates
        assert p.estimate.fits
        assert p.strategy == p.estimate.strategy
        assert len(set(p.gpu_ids)) == len(p.gpu_ids)
        assert p.global_batch == p.workload.micro_batch * p.workload.grad_accum * p.num_processes
        assert all(isinstance(r, str) and r for r in p.reasons)
