"""The step-time terms fitted to the 2x H200 benchmark matrix (bench/results/h200-x2-2026-11-30.json): attention
efficiency, LoRA adapter passes, QLoRA dequantisation, ZeRO-3's per-pass overhead, Liger's saving and allocator
retries at the card's limit."""

import pytest

from generator.estimate import Placement, Workload, estimate
from generator.estimate.comm import communication
from generator.estimate.timing import (
    ALLOCATOR_PRESSURE_FRACTION,
    step_timing,
)
from generator.model import load_model

MISTRAL = load_model("mistral-7b")
ONE = Placement(num_gpus_per_machine=1, gpu_name="NVIDIA H200", gpu_memory_gb=150.75, busbw_gbps=0)
TWO = Placement(num_gpus_per_machine=2, gpu_name="NVIDIA H200", gpu_memory_gb=150.75, busbw_gbps=339.0)
PACKED = 54
"""The matrix's packed documents (bench.run_matrix.BENCH_DOC_TOKENS): SDPA got a dense mask at every length."""


def _tps_error(workload: Workload, placement: Placement, strategy: str, measured_s: float) -> float:
    e = estimate(MISTRAL, workload, placement, strategy)
    return e.tokens_per_s_per_gpu / (workload.seq_len * workload.micro_batch / measured_s) - 1


@pytest.mark.parametrize(
    ("placement", "workload", "measured_s"),
    [
        (ONE, Workload(method="lora"), 0.660),
        (ONE, Workload(method="lora", grad_checkpointing=False), 0.470),
        (TWO, Workload(method="lora"), 0.673),
        (TWO, Workload(method="lora", grad_checkpointing=False), 0.480),
        (TWO, Workload(method="lora", seq_len=1024, micro_batch=4, doc_tokens=PACKED), 0.584),
        (ONE, Workload(method="qlora"), 0.778),
    ],
)
def test_lora_and_qlora_matrix_rows(placement, workload, measured_s):
    """lora_bytes_per_token_width is fitted (bench/fit_compute.py, minimax) to the fourteen LoRA rows, these five
    among them, and qlora_dequant_bytes_per_param to the two QLoRA rows (this one and the sweep's s16384 row, which
    pull +-10% apart); DDP, rank 16, all seven projections."""
    tol = 0.11 if workload.method == "qlora" else 0.08
    assert abs(_tps_error(workload, placement, "ddp", measured_s)) < tol


def test_lora_is_slower_than_its_flops_alone():
    """4N of GEMMs per token (no weight gradients) is a third less work than full fine-tuning, but peft's adapter
    passes are memory-bound: measured LoRA saved only 17% of the full step without checkpointing, 7% with."""
    for ckpt in (True, False):
        lora = estimate(MISTRAL, Workload(method="lora", grad_checkpointing=ckpt), ONE, "ddp")
        full = estimate(MISTRAL, Workload(grad_checkpointing=ckpt), ONE, "ddp")
        assert lora.step_s > 1.1 * lora.compute_s  # the adapters' memory-bound passes come on top
        # measured 0.83 (no ckpt) and 0.93 (ckpt); each row is within its 8% / 6% fit error, so the ratio within ~10%
        assert 0.74 * full.step_s < lora.step_s < 1.05 * full.step_s


def test_lora_adapter_time_follows_tokens_and_passes():
    def adapter_s(w: Workload) -> float:
        e = estimate(MISTRAL, w, ONE, "ddp")
        return e.step_s - e.compute_s

    base = adapter_s(Workload(method="lora"))
    # Linear in tokens on top of a per-micro-step part (the fp32 base's autocast casts do not grow with tokens).
    per_mb = adapter_s(Workload(method="lora", micro_batch=2)) - base
    assert per_mb > 0
    assert adapter_s(Workload(method="lora", micro_batch=4)) - base == pytest.approx(3 * per_mb, rel=0.05)
    # Checkpointing adds a forward: one more pass out of 1 + 1 + backward.
    assert adapter_s(Workload(method="lora", grad_checkpointing=False)) < 0.85 * base


def test_qlora_fp32_stream_costs_per_forward():
    """train.py's QLoRA runs its residual stream in fp32 (peft's prepare_model_for_kbit_training) through
    bitsandbytes' casts: slower than LoRA of the same shape, more so with the recompute (the stream's passes run in
    every forward). TRL's --dtype bfloat16 keeps a bf16 stream and sits close to LoRA; a dense 4-bit weight's
    dequantisation itself costs next to nothing beside its GEMM (fitted to zero, generator/compute/fit.json)."""
    gap = {}
    for ckpt in (True, False):
        q = estimate(MISTRAL, Workload(method="qlora", grad_checkpointing=ckpt), ONE, "ddp").step_s
        lo = estimate(MISTRAL, Workload(method="lora", grad_checkpointing=ckpt), ONE, "ddp").step_s
        gap[ckpt] = q - lo
    assert gap[False] > 0.05
    assert gap[True] > 1.15 * gap[False]
    bf16 = Workload(method="qlora", script="trainer", load_dtype="bf16", grad_checkpointing=False)
    stream = estimate(MISTRAL, bf16, ONE, "ddp").step_s
    lora = estimate(MISTRAL, Workload(method="lora", script="trainer", load_dtype="bf16", grad_checkpointing=False),
                    ONE, "ddp").step_s  # fmt: skip
    assert stream - lora < gap[False] / 2


def test_zero3_overhead_is_per_pass():
    """ZeRO-3 gathers parameters again for the recompute: its overhead over FSDP2 grows with checkpointing, and
    with gradient accumulation (every micro-step's passes), unlike ZeRO-1/2's."""

    def over_fsdp(w: Workload) -> float:
        return estimate(MISTRAL, w, TWO, "zero3").step_s - estimate(MISTRAL, w, TWO, "fsdp").step_s

    assert over_fsdp(Workload()) > 1.3 * over_fsdp(Workload(grad_checkpointing=False))
    assert over_fsdp(Workload(grad_accum=4)) > 3.5 * over_fsdp(Workload())


def test_attention_costs_more_per_flop_than_the_gemms():
    """Same tokens, four times the span: the 8 seq-1024 x mb4 vs seq-4096 x mb1 matrix pairs ran 0.07-0.09 s apart,
    1.6x what the attention FLOPs cost at the GEMMs' efficiency. Pinned on FSDP2 (0.607 / 0.699 s with ckpt)."""
    short = estimate(MISTRAL, Workload(seq_len=1024, micro_batch=4, doc_tokens=PACKED), TWO, "fsdp")
    long = estimate(MISTRAL, Workload(), TWO, "fsdp")
    assert long.step_s - short.step_s == pytest.approx(0.699 - 0.607, abs=0.01)
    assert abs(_tps_error(Workload(seq_len=1024, micro_batch=4, doc_tokens=PACKED), TWO, "fsdp", 0.607)) < 0.10


@pytest.mark.parametrize(("micro_batch", "measured_s"), [(1, 0.516), (2, 0.893), (4, 1.725)])
def test_liger_saves_elementwise_passes(micro_batch, measured_s):
    """Liger's fused RMSNorm / SwiGLU / RoPE / cross-entropy move fewer bytes than the eager chains
    (estimate.passes; nothing fitted to these rows since issue 26): the saving is compute and nothing else, and the
    predicted step of the Liger rows (FSDP2, fp32 load, no checkpointing, seq 4096) is within 6% of the measured
    (-5.1%, -4.4% and -2.4% since clip_grad_norm_ is priced, 2026-12-05; -4.1%, -4.3% and -2.9% before)."""
    w = Workload(grad_checkpointing=False, micro_batch=micro_batch, liger=True)
    plain = estimate(MISTRAL, Workload(grad_checkpointing=False, micro_batch=micro_batch), TWO, "fsdp")
    fused = estimate(MISTRAL, w, TWO, "fsdp")
    assert fused.compute_s < plain.compute_s
    assert plain.step_s - fused.step_s == pytest.approx(plain.compute_s - fused.compute_s)
    assert abs(_tps_error(w, TWO, "fsdp", measured_s)) < 0.06


def _timing_at(workload: Workload, placement: Placement, strategy: str, reserved_gb: float | None):
    comm = communication(MISTRAL, workload, placement, strategy)
    return step_timing(MISTRAL, workload, placement, strategy, comm, reserved_gb=reserved_gb)


def test_allocator_retries_only_at_the_card_limit():
    w = Workload(grad_checkpointing=False, grad_accum=2)
    free = _timing_at(w, ONE, "fsdp", None)
    assert _timing_at(w, ONE, "fsdp", 0.9 * ONE.gpu_memory_gb).step_s == free.step_s
    full = _timing_at(w, ONE, "fsdp", 0.98 * ONE.gpu_memory_gb)
    once = _timing_at(Workload(grad_checkpointing=False), ONE, "fsdp", 0.98 * ONE.gpu_memory_gb)
    assert once.allocator_s > 0 and full.allocator_s == pytest.approx(2 * once.allocator_s)  # every micro-step retries
    assert full.step_s == pytest.approx(free.step_s + full.allocator_s)


@pytest.mark.parametrize(
    ("placement", "strategy", "workload", "measured_s"),
    [
        (ONE, "fsdp", Workload(grad_checkpointing=False), 0.653),
        (ONE, "ddp", Workload(grad_checkpointing=False), 0.568),
        (TWO, "fsdp", Workload(grad_checkpointing=False, micro_batch=4, liger=True), 1.725),
    ],
)
def test_rows_at_the_card_limit(placement, strategy, workload, measured_s):
    """The three matrix rows whose reserved memory reached 148-149 of 150.75 GB, timed with the predicted reserved
    memory (what the estimator hands step_timing): within the 15% target."""
    reserved = estimate(MISTRAL, workload, placement, strategy).reserved_gb
    assert reserved > ALLOCATOR_PRESSURE_FRACTION * placement.gpu_memory_gb
    t = _timing_at(workload, placement, strategy, reserved)
    measured_tps = workload.seq_len * workload.micro_batch / measured_s
    assert t.tokens_per_s_per_gpu == pytest.approx(measured_tps, rel=0.15)


@pytest.mark.parametrize(
    ("strategy", "micro_batch", "measured_s"),
    [("fsdp", 1, 0.4394), ("fsdp", 2, 0.7183), ("fsdp", 4, 1.3187), ("fsdp_grad_op", 2, 0.6938)],
)
def test_flex_rows_are_predicted_conservatively_within_the_target(strategy, micro_batch, measured_s):
    """bench/results/h200-x2-2026-11-30-bf16init.json: Liger + flex_attention, no checkpointing, seq 4096, ~54-token
    documents: attention is a few % of these steps, so they barely test the flex rate; they land within the 10%
    target (from 6% slow to 1% fast with the measured H200 table)."""
    w = Workload(grad_checkpointing=False, micro_batch=micro_batch, liger=True, attention="flex", doc_tokens=54)
    error = _tps_error(w, TWO, strategy, measured_s)
    assert abs(error) < 0.10
    sdpa = estimate(MISTRAL, Workload(grad_checkpointing=False, micro_batch=micro_batch, liger=True), TWO, strategy)
    assert estimate(MISTRAL, w, TWO, strategy).peak_gb < sdpa.peak_gb  # no dense mask (measured below SDPA)
