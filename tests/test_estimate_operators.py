"""Issue 26: a step as its operators (estimate.operators), priced from a rate table (estimate.compute_table), and a
compute file that moves the plan in the expected direction."""

import copy
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from generator.estimate import Placement, Workload, estimate
from generator.estimate import operators as ops
from generator.estimate.compute_source import SHIPPED, fitted, shipped_table, table_for
from generator.estimate.compute_table import from_document, gemm_tflops
from generator.estimate.compute_time import ELEMENTWISE_SCALE, compute_time
from generator.model import load_model

ROOT = Path(__file__).resolve().parents[1]
ONE = Placement(num_gpus_per_machine=1, gpu_name="NVIDIA H200", gpu_memory_gb=150.75, busbw_gbps=0)
MISTRAL, QWEN, MIXTRAL = load_model("mistral-7b"), load_model("qwen2.5-7b"), load_model("mixtral-8x7b")


def _doc(layer_rows: bool = True) -> dict:
    """The shipped table; without its whole-layer rows where a test supplies its own."""
    doc = json.loads(SHIPPED.read_text())
    if not layer_rows:
        doc["layers"] = []
    return doc


def _slower(doc: dict, factor: float) -> dict:
    """Every rate divided by `factor` (times multiplied), as a slower GPU's probe would write."""
    doc = copy.deepcopy(doc)
    for rows in doc["gemm"].values():
        for r in rows:
            r["tflops"] /= factor
    for r in doc["grouped_gemm"]:
        r["tflops"] /= factor
    for r in doc["attention"]:
        r["fwd_ms"] *= factor
        r["fwdbwd_ms"] *= factor
    for r in doc["hbm"]:
        r["gbps"] /= factor
    for r in doc["fp8_cast"]:
        r["ns_per_elem"] *= factor
    for r in doc["layers"]:
        for k in ("fwd_ms_per_layer", "fwdbwd_ms_per_layer", "ckpt_ms_per_layer"):
            r[k] = r[k] * factor if r.get(k) is not None else None
    doc["measured"] = True
    return doc


def test_gemm_shapes_come_from_the_config():
    lin = {x.name: x for x in ops.linears(QWEN, Workload())}
    assert (lin["k"].k_in, lin["k"].n_out) == (3584, 4 * 128)  # 4 kv heads
    assert (lin["lm_head"].k_in, lin["lm_head"].n_out) == (3584, 152064)  # the real vocabulary
    assert not lin["lm_head"].fp8 and lin["q"].fp8
    moe = {x.name: x for x in ops.linears(MIXTRAL, Workload())}
    assert "gate" not in moe and not moe["router"].fp8  # experts run grouped; the router (8 wide) stays bf16
    ex = ops.experts(MIXTRAL, Workload())
    assert [(e.k_in, e.n_out, e.num_experts, e.top_k) for e in ex] == [(4096, 2 * 14336, 8, 2), (14336, 4096, 8, 2)]


def test_frozen_base_has_no_weight_gradient_gemms():
    lora = ops.gemms(MISTRAL, Workload(method="lora"))
    wgrad = sum(g.flops for g in lora if g.op == "wgrad")
    fwd = sum(g.flops for g in lora if g.op == "fwd")
    assert 0 < wgrad < 0.01 * fwd  # only the rank-16 adapters' weight gradients
    full_fwd, full_bwd = ops.gemm_flops(MISTRAL, Workload())
    lora_fwd, lora_bwd = ops.gemm_flops(MISTRAL, Workload(method="lora"))
    assert full_bwd == pytest.approx(2 * full_fwd)
    assert lora_bwd < 1.1 * lora_fwd  # input gradients (+ the adapters' small weight gradients) only


def test_table_reads_a_measured_shape_exactly_and_interpolates_between():
    t = shipped_table()
    (m, k, n, rate) = t.gemm[("bf16", "fwd")][0]
    assert gemm_tflops(t, "bf16", "fwd", m, k, n) == rate
    other = gemm_tflops(t, "bf16", "fwd", 6000, 4000, 12000)
    rates = [r[3] for r in t.gemm[("bf16", "fwd")]]
    assert min(rates) <= other <= max(rates)


def test_other_gpus_get_the_h200_table_scaled_and_say_so():
    a100 = table_for("NVIDIA A100-SXM4-80GB")
    assert not a100.measured and "scaled from the NVIDIA H200 table" in a100.source and "not measured" in a100.source
    assert not any(dtype == "fp8" for dtype, _ in a100.gemm)  # Ampere has no float8 tensor cores
    h200 = shipped_table()
    key = next(iter(h200.gemm[("bf16", "fwd")]))
    assert gemm_tflops(a100, "bf16", "fwd", *key[:3]) == pytest.approx(key[3] * 312 / 989.4, rel=0.01)
    e = estimate(MISTRAL, Workload(), replace(ONE, gpu_name="NVIDIA A100-SXM4-80GB", gpu_memory_gb=80), "ddp")
    assert any(n.startswith("speed: ") and "scaled" in n for n in e.notes)


def _hbm_scaled(doc: dict, op: str, factor: float) -> dict:
    doc = copy.deepcopy(doc)
    for r in doc["hbm"]:
        if r["op"] == op:
            r["gbps"] *= factor
    return doc


def test_the_layers_passes_are_priced_at_the_widening_copys_rate_not_the_copys():
    """The probe's bf16 -> fp32 copy, not its plain copy, prices the layers' elementwise passes (on an H100 the
    copy ran 0.72x an H200's, the widening copy 0.92x and the same compiled layers 0.93-1.0x), never faster than
    the plain copy; the terms that stream (adapters, casts, the step's tail) stay at the copy's rate."""
    lora = Workload(method="lora")

    def parts(doc):
        table = from_document(doc, "synthetic")
        return compute_time(table, MISTRAL, lora, "ddp"), estimate(MISTRAL, lora, replace(ONE, compute=table), "ddp")

    base, base_e = parts(_doc())
    copy_less, copy_e = parts(_hbm_scaled(_doc(), "copy_bf16", 0.85))  # still above the passes' own rate
    wide_half, _ = parts(_hbm_scaled(_doc(), "cast_bf16_fp32", 0.5))
    assert base.elementwise_s > 0 and copy_less.elementwise_s == pytest.approx(base.elementwise_s)
    assert wide_half.elementwise_s == pytest.approx(2 * base.elementwise_s)
    assert copy_e.tokens_per_s_per_gpu < base_e.tokens_per_s_per_gpu  # the adapters' passes stream
    starved = from_document(_hbm_scaled(_hbm_scaled(_doc(), "copy_bf16", 0.1), "add_bf16", 0.1), "copy-bound")
    assert compute_time(starved, MISTRAL, lora, "ddp").elementwise_s == pytest.approx(
        base.elementwise_s * shipped_table().passes_gbps / fitted(ELEMENTWISE_SCALE, 1.0) / starved.hbm_gbps
    )  # at its copy's rate, not above it
    doc = _doc()
    doc["hbm"] = [r for r in doc["hbm"] if r["op"] != "cast_bf16_fp32"]
    with pytest.raises(ValueError, match="cast_bf16_fp32"):
        from_document(doc, "an older hand-made file")


def test_on_another_card_the_passes_slow_less_than_its_bandwidth_until_it_binds():
    h200 = shipped_table()
    assert h200.passes_gbps < h200.hbm_gbps
    h100, a100, b200 = (table_for(g) for g in ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA B200"))
    assert h100.hbm_gbps == pytest.approx(h200.hbm_gbps * 3.35 / 4.8)
    assert h100.passes_gbps == h200.passes_gbps  # the measured rate, kept on a card with less bandwidth
    assert a100.passes_gbps == a100.hbm_gbps < h200.passes_gbps  # up to its streaming rate
    assert b200.passes_gbps == pytest.approx(h200.passes_gbps * 7.7 / 4.8)
    lora = Workload(method="lora")
    on = {t.gpu: compute_time(t, MISTRAL, lora, "ddp").elementwise_s for t in (h200, h100, a100)}
    h200_s, h100_s, a100_s = on["NVIDIA H200"], on["NVIDIA H100 80GB HBM3"], on["NVIDIA A100-SXM4-80GB"]
    assert h200_s < h100_s < 0.8 * h200_s * 4.8 / 3.35  # slower, by well under its bandwidth's ratio
    assert a100_s == pytest.approx(h100_s * 3.35 / 2.039)  # both at their copy's rate


@pytest.mark.parametrize("workload", [Workload(), Workload(method="lora"), Workload(precision="fp8", liger=True)])
def test_a_slower_compute_file_lowers_the_prediction(workload):
    slow = from_document(_slower(_doc(), 2.0), "synthetic: every rate halved")
    base = estimate(MISTRAL, workload, ONE, "ddp")
    slower = estimate(MISTRAL, workload, replace(ONE, compute=slow), "ddp")
    assert slower.tokens_per_s_per_gpu < 0.6 * base.tokens_per_s_per_gpu


def test_plan_compute_file_changes_the_plan_prediction(tmp_path):
    path = tmp_path / "slow.json"
    path.write_text(json.dumps(_slower(_doc(), 3.0)))

    def plan(*extra):
        args = ["--model", "mistral-7b", "--machine", "h200-sxm-2", "--num-gpus", "1", "--json", *extra]
        r = subprocess.run([sys.executable, "-m", "generator", "plan", *args], cwd=ROOT, capture_output=True,
                           timeout=120)  # fmt: skip
        assert r.returncode == 0, r.stderr.decode()[-2000:]
        return {e["strategy"]: e["tokens_per_s_per_gpu"] for e in json.loads(r.stdout)["estimates"]}

    base, slow = plan(), plan("--compute-file", str(path))
    assert all(slow[s] < 0.5 * base[s] for s in base)


def test_fp32_experts_outside_train_py_run_the_slow_loop():
    """transformers' grouped_mm_fallback casts the input to fp32 weights: 10.8x slower measured (issue 26);
    train.py casts the experts to bf16 per forward (training/moe.py)."""
    cut = replace(MIXTRAL, num_layers=4)
    full = Workload(micro_batch=2)
    ours = estimate(cut, full, ONE, "ddp")
    plain = estimate(cut, replace(full, script="custom"), ONE, "ddp")
    assert plain.step_s > 3 * ours.step_s


def test_fp8_does_not_touch_the_experts():
    cut = replace(MIXTRAL, num_layers=8)
    w = Workload(method="lora", micro_batch=4, grad_checkpointing=False, load_dtype="bf16")
    bf16 = estimate(cut, w, ONE, "ddp")
    fp8 = estimate(cut, replace(w, precision="fp8"), ONE, "ddp")
    dense_gain = (
        estimate(MISTRAL, replace(w, precision="fp8"), ONE, "ddp").tokens_per_s_per_gpu
        / estimate(MISTRAL, w, ONE, "ddp").tokens_per_s_per_gpu
    )
    assert fp8.tokens_per_s_per_gpu / bf16.tokens_per_s_per_gpu < dense_gain  # experts (most FLOPs) stay bf16


@pytest.mark.parametrize("name", ["mistral-7b", "llama-3-8b", "qwen2.5-7b", "llama-2-13b"])
@pytest.mark.parametrize("method", ["full", "lora", "qlora"])
@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_mfu_never_exceeds_100_percent(name, method, precision):
    if method == "qlora" and precision == "fp8":
        pytest.skip("fp8 does not apply to QLoRA")
    model = load_model(name)
    for ckpt in (True, False):
        w = Workload(method=method, precision=precision, grad_checkpointing=ckpt, load_dtype="bf16")
        assert 0 < estimate(model, w, ONE, "ddp").mfu < 1.0


def test_mfu_counts_executed_flops_not_6n():
    """A frozen base runs no weight-gradient GEMMs, so LoRA's executed FLOPs per token are ~4N, not 6N."""
    from generator.estimate.attention import useful_keys_per_query
    from generator.estimate.timing import model_flops_per_token

    attn = 12.0 * 32 * 32 * 128 * useful_keys_per_query(MISTRAL, Workload())  # the same for both methods
    full = model_flops_per_token(MISTRAL, Workload())
    lora = model_flops_per_token(MISTRAL, Workload(method="lora"))
    assert lora - attn == pytest.approx((full - attn) * 2 / 3, rel=0.02)
    assert model_flops_per_token(MISTRAL, Workload(precision="fp8")) == full  # bf16-equivalent


def test_the_host_floor_slows_small_steps_only():
    """Against the same table without host rows, host rows saying a layer takes 10 ms to issue: a 2,048-token step
    waits on the host, a 32k-token step does not (the GPU work per layer is longer than the host's)."""
    doc, no_host = _doc(), _doc()
    no_host["host"] = []
    doc["host"] = [
        {
            "variant": v,
            "compiled": False,
            "layers": 8,
            "tokens": 64,
            "fwd_ms_per_layer": 4.0,
            "fwdbwd_ms_per_layer": 10.0,
        }
        for v in ("full", "lora")
    ]
    slow_host = from_document(doc, "synthetic host rows")
    small, big = Workload(method="lora", seq_len=2048, grad_checkpointing=False), Workload(method="lora", seq_len=32768)
    for w, slower in ((small, True), (big, False)):
        base = estimate(MISTRAL, w, replace(ONE, compute=from_document(no_host, "no host rows")), "ddp").step_s
        with_host = estimate(MISTRAL, w, replace(ONE, compute=slow_host), "ddp").step_s
        assert (with_host > 1.05 * base) is slower
        assert with_host >= base


def _host_row(variant: str, liger: bool, per_layer_ms: float, step_ms: float | None) -> dict:
    row = {"variant": variant, "compiled": False, "liger": liger, "layers": 6, "tokens": 64,
           "fwd_ms_per_layer": per_layer_ms / 3, "fwdbwd_ms_per_layer": per_layer_ms}  # fmt: skip
    return row if step_ms is None else {**row, "step_ms": step_ms}


def test_liger_and_the_steps_rest_take_their_own_host_rows():
    """A host-bound 2,048-token LoRA step (the profiled one on one H200 issued 139 ms of kernels in 224 ms): with
    Liger the layer's host time is Liger's row, and what the probe timed outside the layers adds once a step, not
    once a micro-step; a table without Liger rows prices Liger's layers at the plain row."""
    doc = _doc()
    doc["host"] = [_host_row("lora", False, 6.0, 10.0), _host_row("lora", True, 9.0, 30.0)]
    table = from_document(doc, "host rows")
    plain = Workload(method="lora", seq_len=2048, grad_checkpointing=False)
    liger = replace(plain, liger=True)
    assert compute_time(table, MISTRAL, plain, "ddp").host_s == pytest.approx(32 * 6e-3 + 10e-3)
    assert compute_time(table, MISTRAL, liger, "ddp").host_s == pytest.approx(32 * 9e-3 + 30e-3)
    accumulated = compute_time(table, MISTRAL, replace(liger, grad_accum=4), "ddp").host_s
    assert accumulated == pytest.approx(4 * 32 * 9e-3 + 30e-3)
    slower = estimate(MISTRAL, liger, replace(ONE, compute=table), "ddp").step_s
    assert slower > estimate(MISTRAL, plain, replace(ONE, compute=table), "ddp").step_s
    doc["host"] = [_host_row("lora", False, 6.0, None)]  # a table probed before Liger's rows and the step's rest
    older = from_document(doc, "older host rows")
    assert compute_time(older, MISTRAL, liger, "ddp").host_s == pytest.approx(32 * 6e-3)


def test_a_compute_file_from_another_gpu_says_so():
    other = _doc()
    other["gpu"], other["measured"] = "NVIDIA A100-SXM4-80GB", True
    table = from_document(other, "a100.json")
    e = estimate(MISTRAL, Workload(), replace(ONE, compute=table), "ddp")
    assert any(n.startswith("speed: ") and "not on 'NVIDIA H200'" in n for n in e.notes)


def test_flex_at_a_document_length_never_probed_takes_the_flash_rows():
    """The probe's flex rows at 1,024-token documents price packed short documents; one document per 16k row is
    priced from the causal flash rows instead, and from flex's own rows again once a row at that length exists."""
    from generator.estimate.attention_rates import attention_tflops

    doc = _doc()
    doc["attention"] = [a for a in doc["attention"] if a["path"] != "flex" or a["doc"] == 1024]
    short_only = from_document(doc, "flex at 1,024-token documents only")
    flash = attention_tflops(short_only, "sdpa_causal", 16384, 32, 8)
    assert attention_tflops(short_only, "flex", 16384, 32, 8, doc=16384) == flash
    assert attention_tflops(short_only, "flex", 16384, 32, 8, doc=1024) != flash
    long_row = dict(next(a for a in doc["attention"] if a["path"] == "flex"), doc=16384, seq=16384, mb=1)
    long_row["fwd_ms"], long_row["fwdbwd_ms"] = 0.5 * long_row["fwd_ms"], 0.5 * long_row["fwdbwd_ms"]
    doc["attention"].append(long_row)
    with_long = from_document(doc, "and one at 16k")
    assert attention_tflops(with_long, "flex", 16384, 32, 8, doc=16384) != flash


def _mixtral_layer_rows(doc: dict, fwd_ms: float, fwdbwd_ms: float) -> dict:
    mixtral = load_model("mixtral-8x7b")
    doc = copy.deepcopy(doc)
    doc["layers"] = [
        {"model": "mixtral-8x7b", "model_type": "mixtral", "hidden": mixtral.hidden_size,
         "intermediate": mixtral.intermediate_size, "heads": mixtral.num_heads, "kv_heads": mixtral.num_kv_heads,
         "experts": mixtral.num_experts, "top_k": mixtral.experts_per_token, "variant": v, "mb": 2, "seq": 4096,
         "depths": [1, 3], "fwd_ms_per_layer": fwd_ms, "fwdbwd_ms_per_layer": fwdbwd_ms}
        for v in ("frozen", "full")
    ]  # fmt: skip
    return doc


def test_moe_layers_are_priced_whole_where_the_table_times_them():
    """A whole-layer row (probe --compute's layer section) replaces a Mixtral layer's operators: the step follows the
    row (twice the row's time, about twice the layers' share), a dense model and QLoRA (whose experts are per-expert
    4-bit loops, not the row's grouped_mm) are priced as before, and a table without rows changes nothing."""
    mixtral, base = load_model("mixtral-8x7b"), _doc(layer_rows=False)
    plain = from_document(base, "no layer rows")
    slow = from_document(_mixtral_layer_rows(base, 40.0, 120.0), "layer rows")
    slower = from_document(_mixtral_layer_rows(base, 80.0, 240.0), "layer rows x2")
    lora = Workload(method="lora", seq_len=4096, micro_batch=4, grad_checkpointing=False, load_dtype="bf16")
    a, b = compute_time(slow, mixtral, lora, "ddp"), compute_time(slower, mixtral, lora, "ddp")
    assert a.layers_s > 0 and a.experts_s == 0 and compute_time(plain, mixtral, lora, "ddp").layers_s == 0
    assert b.layers_s > 2 * a.layers_s  # the attention share taken out of the row stays the same
    assert b.gemm_s == a.gemm_s > 0  # lm_head and the adapters, outside the row
    assert compute_time(plain, mixtral, lora, "ddp").gpu_s == compute_time(from_document(base, "again"), mixtral,
                                                                            lora, "ddp").gpu_s  # fmt: skip
    for model, w in ((MISTRAL, lora), (mixtral, replace(lora, method="qlora"))):
        assert compute_time(slow, model, w, "ddp").layers_s == 0
        assert compute_time(slow, model, w, "ddp").gpu_s == pytest.approx(compute_time(plain, model, w, "ddp").gpu_s)
    # checkpointing reruns the row's forward: more time than without
    ckpt = compute_time(slow, mixtral, replace(lora, grad_checkpointing=True), "ddp")
    assert ckpt.layers_s > a.layers_s


def test_levers_a_layer_row_did_not_run_move_it_by_the_operators_difference():
    """Liger and float8 on Mixtral: the layer row (bf16, eager, no Liger) stays the anchor and the lever moves the
    step by what the operators say it saves. Falling back to the operators alone dropped what the row measures (the
    expert dispatch): Mixtral's Liger and float8 rows were predicted 29% and 22% fast."""
    mixtral, base = load_model("mixtral-8x7b"), _doc(layer_rows=False)
    plain = from_document(base, "no layer rows")
    slow = from_document(_mixtral_layer_rows(base, 40.0, 120.0), "layer rows")
    slower = from_document(_mixtral_layer_rows(base, 80.0, 240.0), "layer rows x2")
    lora = Workload(method="lora", seq_len=4096, micro_batch=4, grad_checkpointing=False, load_dtype="bf16")
    for lever in (replace(lora, liger=True), replace(lora, precision="fp8"), replace(lora, compiled_layers=True)):
        anchored, twin = compute_time(slow, mixtral, lever, "ddp"), compute_time(slow, mixtral, lora, "ddp")
        saving = compute_time(plain, mixtral, lora, "ddp").gpu_s - compute_time(plain, mixtral, lever, "ddp").gpu_s
        assert anchored.layers_s > 0 and anchored.experts_s == 0, lever
        assert saving > 0, lever
        assert twin.gpu_s - anchored.gpu_s == pytest.approx(saving), lever
        # the row carries through: twice the row, the same saving
        assert compute_time(slower, mixtral, lever, "ddp").gpu_s - anchored.gpu_s == pytest.approx(
            compute_time(slower, mixtral, lora, "ddp").gpu_s - twin.gpu_s
        ), lever


def test_a_compiled_layer_row_prices_the_steps_that_compile_their_layers_and_no_other():
    """probe --compute --full times MoE layers compiled as train.py compiles them: a compiled row anchors float8 and
    --compile-layers (then only float8's own difference is added from the operators), and leaves eager steps on the
    eager row. Without one, a compiled step keeps the eager row plus the operators' difference."""
    mixtral, base = load_model("mixtral-8x7b"), _doc(layer_rows=False)
    eager_only = _mixtral_layer_rows(base, 40.0, 120.0)
    doc = copy.deepcopy(eager_only)
    doc["layers"] += [{**r, "compiled": True, "fwd_ms_per_layer": 20.0, "fwdbwd_ms_per_layer": 60.0}
                      for r in eager_only["layers"]]  # fmt: skip
    eager_table, both = from_document(eager_only, "eager rows"), from_document(doc, "eager and compiled rows")
    lora = Workload(method="lora", seq_len=4096, micro_batch=4, grad_checkpointing=False, load_dtype="bf16")
    compiled, fp8 = replace(lora, compiled_layers=True), replace(lora, precision="fp8")
    assert compute_time(both, mixtral, lora, "ddp").gpu_s == pytest.approx(
        compute_time(eager_table, mixtral, lora, "ddp").gpu_s
    )
    for w in (compiled, fp8):
        faster, before = compute_time(both, mixtral, w, "ddp"), compute_time(eager_table, mixtral, w, "ddp")
        assert faster.gpu_s < before.gpu_s, w
    # the compiled row is the compiled bf16 step itself; float8 moves it by the operators' float8 difference
    plain = from_document(base, "no layer rows")
    fp8_saving = compute_time(plain, mixtral, compiled, "ddp").gpu_s - compute_time(plain, mixtral, fp8, "ddp").gpu_s
    assert compute_time(both, mixtral, compiled, "ddp").gpu_s - compute_time(both, mixtral, fp8, "ddp").gpu_s == (
        pytest.approx(fp8_saving)
    )
    # halving the compiled row's time takes about half the layers' time off: the row, not the operators, prices it
    assert compute_time(both, mixtral, compiled, "ddp").layers_s < 0.75 * compute_time(eager_table, mixtral, compiled,
                                                                                       "ddp").layers_s  # fmt: skip


def test_per_call_gemm_rows_lose_the_launch_gap_and_burst_rows_are_read_as_measured():
    """A table timed one call at a time (the probe before 2026-12-02) carried each call's launch gap: a 40 us rank-16
    GEMM reads about twice as fast once the gap is off, a 3 ms GEMM about the same; a table timed in bursts (the
    probe's method since) or each call after a copy (--gemm-timing interleaved: the copy hides the launch) is read
    as written."""
    from generator.estimate.compute_table import GEMM_BURST, GEMM_INTERLEAVED, PER_CALL_LAUNCH_GAP_MS

    # the table the probe wrote when it still timed one call at a time
    doc = json.loads((Path(__file__).parents[1] / "bench/results/compute-h200-2026-12-02.json").read_text())
    doc["method"] = {k: v for k, v in doc["method"].items() if k != "gemm_timing"}
    rows = doc["gemm"]["bf16"]
    small = next(r for r in rows if r["op"] == "fwd" and r["n"] == 16 and r["m"] == 8192)
    big = max((r for r in rows if r["op"] == "fwd"), key=lambda r: r["ms"])
    per_call = from_document(doc, "per call")
    burst = from_document({**doc, "method": {**doc["method"], "gemm_timing": GEMM_BURST}}, "burst")
    interleaved = from_document({**doc, "method": {**doc["method"], "gemm_timing": GEMM_INTERLEAVED}}, "interleaved")
    derived = from_document({**doc, "measured": False}, "a provisional table: rates derived, not timed")
    for r, lo, hi in ((small, 1.5, 3.0), (big, 1.0, 1.02)):
        key = (r["m"], r["k"], r["n"])
        assert gemm_tflops(burst, "bf16", "fwd", *key) == r["tflops"]
        assert gemm_tflops(interleaved, "bf16", "fwd", *key) == r["tflops"]
        assert gemm_tflops(derived, "bf16", "fwd", *key) == r["tflops"]
        gained = gemm_tflops(per_call, "bf16", "fwd", *key) / r["tflops"]
        assert gained == pytest.approx(r["ms"] / max(r["ms"] - PER_CALL_LAUNCH_GAP_MS, 0.5 * r["ms"]))
        assert lo < gained < hi


def test_lora_rank_gemms_are_a_small_share_of_a_mistral_lora_step():
    """A profiled Mistral-7B LoRA step (16,384 tokens, rank 16 on every linear, one H200) spent 74-78 ms in LoRA's
    rank-16 GEMMs and 630-670 ms in the base's (bench/results/profile-h200-2026-12-02/): the shipped table prices
    them within 25% of that, not the 2.4x the per-call launch gap gave."""
    t = shipped_table()
    w = Workload(method="lora", seq_len=4096, micro_batch=4, attention="flex", doc_tokens=54, load_dtype="bf16")
    base = lora = 0.0
    for g in ops.gemms(MISTRAL, w):
        s = g.flops / gemm_tflops(t, g.dtype, g.op, g.m, g.k, g.n) / 1e12
        if min(g.m, g.k, g.n) <= w.lora_r:
            lora += s
        else:
            base += s
    assert 0.074 * 0.75 < lora < 0.078 * 1.25
    assert 0.63 * 0.9 < base < 0.67 * 1.1


def test_memory_bound_work_in_the_layers_hides_under_a_host_bound_step_and_the_tail_does_not():
    """The adapters' passes and the weights' casts are GPU kernels the host issues while it issues the layers: a step
    whose host time passes the GPU's whole work costs the host's time, not the host's plus theirs. Clipping and the
    optimizer's update are issued after the backward, and the step ends in a host read of the loss, so they add to
    the host's time; where the GPU is the longer, everything adds as before."""
    from generator.estimate.comm import Comm
    from generator.estimate.step_traffic import tail_bytes
    from generator.estimate.timing import step_timing

    doc = _doc()
    for method, per_layer_ms in (("lora", 20.0), ("full", 40.0)):  # 32 x 20 (40) ms: far past the GPU's work
        w = Workload(method=method, seq_len=2048, grad_checkpointing=False)
        tail_s = tail_bytes(MISTRAL, w, ONE, "ddp") / (shipped_table().hbm_gbps * 1e9)
        doc["host"] = [_host_row(method, False, per_layer_ms, 10.0)]
        t = step_timing(MISTRAL, w, replace(ONE, compute=from_document(doc, "slow host")), "ddp", Comm(0, 0, 0))
        assert t.memory_s > tail_s > 0 and t.parts.host_s > t.parts.gpu_s + t.memory_s
        assert t.step_s == pytest.approx(t.parts.host_s + tail_s)
        doc["host"] = [_host_row(method, False, 0.1, 0.0)]  # a fast host: the GPU's work sets the step
        t = step_timing(MISTRAL, w, replace(ONE, compute=from_document(doc, "fast host")), "ddp", Comm(0, 0, 0))
        assert t.step_s == pytest.approx(t.parts.gpu_s + t.memory_s)
    assert tail_s > 0.02  # a 7B full fine-tune's fp32 AdamW and clip move hundreds of GB; LoRA's adapters' far less


def test_an_moe_without_layer_rows_says_its_speed_is_priced_from_operators():
    """The plan warns (a `speed:` note) where an MoE LoRA or full step has no whole-layer row, in its table or the
    shipped one a partial table is completed from, and names the probe that times one; not for a model the table
    has rows for, not for a dense model, not for QLoRA (the probe cannot build train.py's NF4 layers)."""
    from generator.estimate.compute_source import SPEED_NOTE_PREFIX
    from generator.model import spec_from_config
    from generator.model.presets import preset_config

    def moe_notes(model, workload) -> list[str]:
        e = estimate(model, workload, ONE, "ddp")
        return [n for n in e.notes if n.startswith(f"{SPEED_NOTE_PREFIX}{model.name}'s MoE layers")]

    wider = {k: v for k, v in preset_config("mixtral-8x7b").items() if not k.startswith("_")}
    unprobed = spec_from_config({**wider, "intermediate_size": 8192}, "mixtral-f8192")  # widths no row has
    lora = Workload(method="lora", seq_len=4096, micro_batch=2, grad_checkpointing=False, load_dtype="bf16")
    (note,) = moe_notes(unprobed, lora)
    assert "probe --compute --full --model mixtral-f8192" in note
    assert moe_notes(unprobed, replace(lora, precision="fp8")) and moe_notes(unprobed, replace(lora, method="full"))
    assert not moe_notes(MIXTRAL, lora) and not moe_notes(MIXTRAL, replace(lora, precision="fp8"))
    assert not moe_notes(MISTRAL, lora)
    assert not moe_notes(unprobed, replace(lora, method="qlora"))
