"""Communication volumes, step time calibration, the article's placement effect and the strategy ladder."""

import pytest

from generator.estimate import Placement, Workload, estimate, estimate_all
from generator.estimate.comm import communication
from generator.estimate.timing import model_flops_per_token
from generator.model import flops_per_token, load_model

MISTRAL = load_model("mistral-7b")
PSI = MISTRAL.params_total
ONE_H200 = Placement(num_gpus_per_machine=1, gpu_name="NVIDIA H200", gpu_memory_gb=141, busbw_gbps=0)


def _gpus(n: int, bw: float = 370.0, name: str = "NVIDIA H200", **kw) -> Placement:
    return Placement(num_gpus_per_machine=n, gpu_name=name, gpu_memory_gb=141, busbw_gbps=bw, **kw)


@pytest.mark.parametrize(("load_dtype", "measured_s", "tol"), [("bf16", 0.607, 0.08), ("fp32", 0.684, 0.08)])
def test_step_time_calibration_one_h200(load_dtype, measured_s, tol):
    """shared/topo/README.md: 0.607 s/step (bf16 load) and 0.684 s (fp32 load): two of the rows the operator model's
    elementwise scale is fitted on (minimax over eight single-GPU rows, generator/compute/fit.json)."""
    e = estimate(MISTRAL, Workload(load_dtype=load_dtype), ONE_H200, "ddp")
    assert e.step_s == pytest.approx(measured_s, rel=tol)
    assert e.comm_gb_per_step == 0 and e.comm_s == 0


def test_mfu_uses_executed_model_flops_over_dense_peak():
    w = Workload(load_dtype="bf16")
    e = estimate(MISTRAL, w, ONE_H200, "ddp")
    assert e.mfu == pytest.approx(e.tokens_per_s_per_gpu * model_flops_per_token(MISTRAL, w) / 989.4e12)
    # issue 5 measured 6,748 tokens/s: 34% on 6N + 12*L*h*s; the causal half of the scores makes it ~32% executed
    assert 6748 * model_flops_per_token(MISTRAL, w) / 989.4e12 == pytest.approx(0.32, abs=0.01)
    assert model_flops_per_token(MISTRAL, w) < flops_per_token(MISTRAL, 4096)


def test_comm_volumes_per_strategy():
    n, ring = 4, 3 / 4
    w = Workload(load_dtype="bf16")
    vol = {s: communication(MISTRAL, w, _gpus(n), s).bus_bytes for s in ("ddp", "zero1", "zero2", "zero3", "fsdp")}
    assert vol["ddp"] == pytest.approx(2 * PSI * 2 * ring)  # all-reduce of bf16 grads
    assert vol["zero1"] == pytest.approx(vol["ddp"]) == pytest.approx(vol["zero2"])  # RS + AG
    assert vol["zero3"] == pytest.approx(1.5 * vol["ddp"]) == pytest.approx(vol["fsdp"])
    # fp32-loaded DDP all-reduces fp32 gradients.
    assert communication(MISTRAL, Workload(load_dtype="fp32"), _gpus(n), "ddp").bus_bytes == pytest.approx(
        2 * vol["ddp"]
    )


def test_accumulation_repeats_only_per_micro_step_collectives():
    one, four = Workload(load_dtype="bf16"), Workload(load_dtype="bf16", grad_accum=4)
    vol = {
        s: (communication(MISTRAL, one, _gpus(4), s).bus_bytes, communication(MISTRAL, four, _gpus(4), s).bus_bytes)
        for s in ("ddp", "zero1", "zero2", "zero3", "fsdp")
    }
    assert vol["ddp"][1] == vol["ddp"][0] and vol["zero1"][1] == vol["zero1"][0]  # no_sync / boundary-only reduce
    assert vol["zero2"][1] == pytest.approx(vol["zero2"][0] * 5 / 2)  # RS every micro-step, AG once
    assert vol["zero3"][1] == pytest.approx(4 * vol["zero3"][0])
    assert vol["fsdp"][1] == pytest.approx(vol["fsdp"][0] * 9 / 3)  # AG x2 per micro-step, RS once (no_sync)


def test_hsdp_splits_traffic_between_island_and_replicas():
    w = Workload(load_dtype="bf16")
    fast = _gpus(8, bw=35.0, shard_size=4, shard_busbw_gbps=322.0)
    hsdp, fsdp = communication(MISTRAL, w, fast, "hsdp"), communication(MISTRAL, w, fast, "fsdp")
    assert hsdp.seconds < fsdp.seconds / 3


def test_article_effect_same_four_gpus_in_one_group_vs_spread():
    """h200-nvl-8-like: 4 GPUs in one NVLink group (322 GB/s) vs spread over two (35 GB/s), seq 512, mb 2 (the
    article's workload: bf16 load, no checkpointing). Roughly 3-5x fewer tokens/s, FSDP hit harder than DDP."""
    w = Workload(seq_len=512, micro_batch=2, grad_checkpointing=False, load_dtype="bf16")
    drop = {}
    for s in ("ddp", "fsdp"):
        inside = estimate(MISTRAL, w, _gpus(4, 322.0, "NVIDIA H200 NVL"), s)
        spread = estimate(MISTRAL, w, _gpus(4, 35.0, "NVIDIA H200 NVL"), s)
        drop[s] = inside.tokens_per_s_per_gpu / spread.tokens_per_s_per_gpu
    assert 2.8 <= drop["ddp"] <= 5.5  # "roughly 3-5x": 2.9 since the operator model (issue 26)
    assert 3.0 <= drop["fsdp"] <= 5.5
    assert drop["fsdp"] > drop["ddp"]


@pytest.mark.parametrize(
    ("workload", "measured_s"),
    [
        (Workload(), 0.747),  # full checkpointing, 27.2% MFU
        (Workload(grad_checkpointing=False), 0.620),  # 32.8% MFU
        (Workload(grad_checkpointing=False, micro_batch=2, liger=True), 0.953),  # 8,594 tokens/s per GPU
    ],
)
def test_fsdp_two_h200_reference_points(workload, measured_s):
    """Issue 5: FSDP2 under plain Accelerate on 2x H200 (NVLink, measured busbw 338 GB/s). Not fitted to these (the
    compute efficiency is calibrated on one GPU; Liger's saving on the benchmark matrix): within 10%."""
    e = estimate(MISTRAL, workload, _gpus(2, 338.0), "fsdp")
    assert e.step_s == pytest.approx(measured_s, rel=0.10)


def test_ddp_two_h200_step():
    """Measured with tests/test_estimate_gpu.py on 2x H200 (bf16 load, seq 4096, checkpointing): 0.662 s/step,
    against 0.611 s on one GPU: the gradient all-reduce was not hidden (OVERLAP_EFFICIENCY fitted to 0)."""
    two = estimate(MISTRAL, Workload(load_dtype="bf16"), _gpus(2, 338.0), "ddp")
    one = estimate(MISTRAL, Workload(load_dtype="bf16"), ONE_H200, "ddp")
    assert two.step_s == pytest.approx(0.662, rel=0.05)
    assert two.step_s - one.step_s == pytest.approx(2 * MISTRAL.params_total / 338e9, rel=0.05)


def test_ladder_on_four_h200():
    """Issue 3's ladder: DDP highest, then ZeRO-1, ZeRO-2, ZeRO-3/FSDP lowest (4 x H200, busbw 370)."""
    for load_dtype in ("fp32", "bf16"):
        peaks = {e.strategy: e.peak_gb for e in estimate_all(MISTRAL, Workload(load_dtype=load_dtype), _gpus(4))}
        assert peaks["ddp"] > peaks["zero1"] > peaks["zero2"] > max(peaks["zero3"], peaks["fsdp"])
        assert peaks["zero3_offload"] < min(peaks["zero3"], peaks["fsdp"])


def test_offload_is_slower():
    w = Workload()
    assert estimate(MISTRAL, w, _gpus(4), "zero3_offload").step_s > 2 * estimate(MISTRAL, w, _gpus(4), "zero3").step_s


def test_slow_links_never_speed_up():
    w = Workload(seq_len=1024)
    for s in ("ddp", "zero1", "zero2", "zero3", "fsdp", "fsdp_grad_op"):
        assert estimate(MISTRAL, w, _gpus(4, 50.0), s).step_s >= estimate(MISTRAL, w, _gpus(4, 400.0), s).step_s


def test_multi_machine_uses_the_slower_link():
    w = Workload(load_dtype="bf16")
    one = Placement(num_gpus_per_machine=8, gpu_name="NVIDIA H200", gpu_memory_gb=141, busbw_gbps=370)
    two = Placement(
        num_gpus_per_machine=4,
        gpu_name="NVIDIA H200",
        gpu_memory_gb=141,
        busbw_gbps=370,
        num_machines=2,
        inter_node_gbps=40.0,
    )
    assert communication(MISTRAL, w, two, "fsdp").seconds > 5 * communication(MISTRAL, w, one, "fsdp").seconds


@pytest.mark.parametrize(("strategy", "measured_s"), [("zero1", 0.747), ("zero2", 0.744)])
def test_deepspeed_two_h200_steps(strategy, measured_s):
    """Measured with tests/test_estimate_gpu.py on 2x H200 (DeepSpeed 0.19.8, bf16 load, seq 4096, checkpointing);
    deepspeed_overhead_s_per_bparam is fitted on them and the matrix's ZeRO-1/2 rows (generator/compute/fit.json)."""
    e = estimate(MISTRAL, Workload(load_dtype="bf16"), _gpus(2, 338.0), strategy)
    assert e.step_s == pytest.approx(measured_s, rel=0.03)


@pytest.mark.parametrize(
    ("workload", "measured_s"),
    [
        (Workload(load_dtype="bf16"), 1.269),  # tests/test_estimate_gpu.py: one timed step
        (Workload(), 1.047),  # bench/results/h200-x2-2026-11-30.json medians from here on
        (Workload(seq_len=1024, micro_batch=4), 0.891),
        (Workload(grad_checkpointing=False), 0.814),
    ],
)
def test_zero3_two_h200_steps(workload, measured_s):
    """zero3_overhead_s_per_pass_per_bparam is fitted minimax (bench/fit_compute.py) to the seven ZeRO-3 rows on 2x
    H200 (these four and the bf16init reruns, which scatter +-15% from the first run): the single-step bf16 row and
    the rerun at seq 4096 sit at opposite ends, about 16% each (REPORT.md's known miss)."""
    e = estimate(MISTRAL, workload, _gpus(2, 339.0), "zero3")
    measured_tps = workload.seq_len * workload.micro_batch / measured_s
    assert e.tokens_per_s_per_gpu == pytest.approx(measured_tps, rel=0.17)
