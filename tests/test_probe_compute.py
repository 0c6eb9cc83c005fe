"""`probe --compute` on the CPU: tiny sizes, every section present with units, the file written once."""

import json
import subprocess
import sys
from pathlib import Path

from generator.estimate.compute_table import from_document
from generator.estimate.host_time import model_key
from generator.model import load_model
from generator.probe import compute_grid as grid

ROOT = Path(__file__).resolve().parents[1]


def probe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "generator", "probe", "--compute", *args], cwd=ROOT, capture_output=True, timeout=120
    )


def test_cpu_probe_writes_every_section(tmp_path):
    out = tmp_path / "compute.json"
    r = probe("--device", "cpu", "--model", "qwen2.5-7b", "--output", str(out))
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    doc = json.loads(out.read_text())
    assert doc["version"] == 1 and doc["kind"] == "compute" and doc["device"] == "cpu" and doc["measured"]
    assert {"torch", "cuda"} <= set(doc["env"]) and "measured_at" in doc["method"]
    ops = {row["op"] for row in doc["gemm"]["bf16"]}
    assert ops == {"fwd", "dgrad", "wgrad"} and all(row["tflops"] > 0 for row in doc["gemm"]["bf16"])
    assert doc["gemm"]["fp8"] == [] and any("fp8" in s for s in doc["skipped"])
    assert {row["impl"] for row in doc["grouped_gemm"]} >= {"loop_bf16", "loop_fp32"}
    assert {row["path"] for row in doc["attention"]} == {"sdpa_causal", "sdpa_dense"}
    assert all(row["fwdbwd_ms"] > 0 for row in doc["attention"])
    assert {row["op"] for row in doc["hbm"]} == {
        "copy_bf16", "add_bf16", "cast_bf16_fp32", "adamw_fused_fp32", "clip_grad_norm_fp32"
    }  # fmt: skip
    assert all(row["gbps"] > 0 for row in doc["hbm"])
    assert {(r["variant"], r["compiled"]) for r in doc["host"]} == {("full", False), ("lora", False)}
    # transformers' own Mixtral layer at toy widths on the CPU, parsed back by the estimator's table
    (layer,) = doc["layers"]
    assert (layer["model"], layer["model_type"], layer["experts"], layer["top_k"]) == ("mixtral-8x7b", "mixtral", 4, 2)
    assert layer["fwd_ms_per_layer"] >= 0 and layer["fwdbwd_ms_per_layer"] >= 0 and layer["ckpt_ms_per_layer"] >= 0
    table = from_document(doc, "cpu probe")
    assert {k[-2:] for k in table.layers} == {("frozen", False)}  # (variant, compiled): the CPU times eager rows
    # --model's own layer (Qwen2: q/k/v biases) has host rows of its own, under the key the planner looks it up by
    own = [row for row in doc["host"] if "model_type" in row]
    assert {(row["model"], row["variant"]) for row in own} == {("qwen2.5-7b", "lora"), ("qwen2.5-7b", "full")}
    assert set(table.host_models) == {model_key(load_model("qwen2.5-7b"))}
    assert {k[0] for k in table.host} == {"lora", "full"} and len(table.host) == 2  # the Mistral rows stay apart
    again = probe("--device", "cpu", "--output", str(out))
    assert again.returncode == 2 and b"already exists" in again.stderr


def test_model_goes_with_compute():
    r = subprocess.run([sys.executable, "-m", "generator", "probe", "--device", "cpu", "--model", "mistral-7b"],
                       cwd=ROOT, capture_output=True, timeout=60)  # fmt: skip
    assert r.returncode == 2 and b"--compute" in r.stderr


def test_grid_covers_the_model_shapes():
    qwen = load_model("qwen2.5-7b")
    gemms = grid.dense_grid([qwen], (8192,))
    shapes = {(g.m, g.k, g.n, g.op) for g in gemms}
    assert (8192, 3584, 512, "fwd") in shapes  # k/v: 4 kv heads x 128
    assert (8192, 152064, 3584, "dgrad") in shapes  # lm_head's input gradient over the real vocabulary
    assert (152064, 8192, 3584, "wgrad") in shapes
    mixtral = load_model("mixtral-8x7b")
    assert grid.model_experts(mixtral) == [(8, 2, 4096, 2 * 14336), (8, 2, 14336, 4096)]
    assert (4096, 14336) not in grid.model_widths(mixtral)  # experts run grouped, not as dense Linears


def test_quick_and_full_contradict_and_full_goes_with_compute():
    r = probe("--device", "cpu", "--quick", "--full")
    assert r.returncode == 2 and b"contradict" in r.stderr and b"Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "generator", "probe", "--device", "cpu", "--full"],
                       cwd=ROOT, capture_output=True, timeout=60)  # fmt: skip
    assert r.returncode == 2 and b"--full goes with --compute" in r.stderr


def test_a_cuda_error_ends_the_probe_with_one_line_and_a_file_the_planner_reads(monkeypatch):
    """A CUDA error that poisons the process (Qwen3-30B-A3B's own host rows hit one on an H100, 2026-12-05) makes
    every later kernel fail the same way: the sections after it are named once as not run, not tried row by row, and
    what was measured before it is still a document the planner parses."""
    from generator.probe import compute_host
    from generator.probe.compute import measure

    def poisoned(clock, *args, **kwargs):
        clock.skip("host lora eager", RuntimeError("CUDA error: an illegal memory access was encountered"))
        return []

    started = []
    monkeypatch.setattr(compute_host, "host_rows", poisoned)
    doc = measure("cpu", None, on_section=started.append)
    assert started[-1] == "host time per layer (eager, compiled)" and len(started) == 6
    (cut,) = [s for s in doc["skipped"] if "every section after it" in s]
    assert cut.startswith("MoE decoder layers, whole and every section after it") and "illegal memory access" in cut
    assert doc["gemm"]["bf16"] and doc["hbm"] and doc["host"] == doc["layers"] == []
    assert set(doc["method"]["sections_s"]) == set(started)
    table = from_document(doc, "cut probe")  # the planner completes the rest from the shipped table
    assert table.gemm and not table.host and not table.layers


def test_every_section_loop_stops_at_a_lost_context_as_at_its_time_box():
    """Clock.cut is the one check each section's row loop makes: past the time box, or after a CUDA error that
    poisons the process, the row is listed with why and not tried."""
    import time

    from generator.probe.clock import Clock
    from generator.probe.compute_bench import gemm_rows

    clock = Clock.for_device("cpu")
    shapes = grid.cpu_grid()[:3]
    assert len(gemm_rows(clock, shapes, "bf16", budget_s=60.0)) == 3 and clock.skipped == []
    assert clock.cut("late row", time.monotonic() - 1.0) and clock.skipped == ["late row: time box"]
    clock.skip("a row", RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert gemm_rows(clock, shapes, "bf16", budget_s=60.0) == []
    assert sum("not run after the CUDA error of an earlier row" in s for s in clock.skipped) == 3
