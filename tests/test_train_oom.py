"""Out of GPU memory, explained (issue 27) without a GPU: the fit check's verdict and levers on pretended GPUs, the one
line an OutOfMemoryError becomes in each phase, and train.py on CPU with a simulated OutOfMemoryError
(TRAIN_TEST_OOM) and a pretended GPU (TRAIN_TEST_GPU): exit 3, one line, no traceback, no half checkpoint.
The real thing on a GPU: tests/test_train_oom_gpu.py."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from generator.model import load_model
from generator.plan.planner import make_plan
from generator.trial.metrics import looks_oom
from training import fit, oom
from training.args import parse_args
from training.errors import EXIT_OUT_OF_MEMORY

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "recipes" / "data" / "synthetic_instruct.jsonl"
H200, RTX4090, H100 = ("NVIDIA H200", 150.1), ("NVIDIA GeForce RTX 4090", 24.0), ("NVIDIA H100 80GB HBM3", 85.0)


def fit_of(argv: list[str], gpu, strategy: str = "ddp", model: str = "mistral-7b"):
    args = parse_args(argv)
    request = fit.plan_request(args, strategy, 1, 1, args.grad_checkpointing, None, False)
    return fit.check_fit(load_model(model), request, 1, gpu)


def gb_per_gpu(lever: str) -> float:
    return float(re.search(r"([0-9.]+) GB per GPU", lever).group(1))


def test_no_gpu_no_check():
    assert fit_of(["--method", "lora"], None) is None


def test_a_run_predicted_over_the_card_is_refused_in_one_line_with_what_would_fit():
    f = fit_of(["--seq-len", "512", "--global-batch", "16"], RTX4090)
    assert not f.fits and f.reserved_gb > f.usable_gb
    line = fit.refusal(f)
    assert "\n" not in line and line.startswith(f"this run does not fit on {f.gpu}")
    assert f"{f.reserved_gb:.1f} GB reserved per GPU > {f.usable_gb:.1f} GB usable" in line
    assert "What would fit: " in line and "--method qlora" in line and line.endswith("--no-fit-check runs it anyway")


def test_the_verdict_has_no_headroom_but_the_levers_have_the_planners():
    # Mistral-7B full on one H200 trains (117 GB measured) though the planner's 10% margin calls it tight.
    assert fit_of(["--global-batch", "16"], H200).fits
    f = fit_of(["--method", "lora", "--micro-batch", "8", "--global-batch", "32", "--no-grad-checkpointing"], H100)
    found = fit.levers(f)
    assert found and all(gb_per_gpu(lever) < f.reserved_gb for lever in found)
    assert all(gb_per_gpu(lever) <= 0.9 * H100[1] for lever in found)


def test_levers_name_the_largest_smaller_micro_batch_and_checkpointing():
    f = fit_of(["--method", "lora", "--micro-batch", "8", "--global-batch", "32", "--no-grad-checkpointing"], H100)
    found = fit.levers(f)
    assert sum(lever.startswith("--micro-batch") for lever in found) == 1
    assert any(lever.startswith("--grad-checkpointing") for lever in found)
    micro = int(next(lever for lever in found if lever.startswith("--micro-batch")).split()[1])
    if 2 * micro < 8:  # the next larger one does not fit the planner's budget
        bigger = make_plan(f.topology, f.model, dataclasses.replace(f.request, micro_batch=2 * micro))
        assert bigger.forced or not bigger.estimate.fits


def test_phase_predictions_are_the_estimators_phases():
    f = fit_of(["--method", "lora", "--global-batch", "16"], H200)
    assert max(f.phases_gb[fit.STEP], f.phases_gb[fit.OPTIMIZER]) == pytest.approx(f.peak_gb, rel=1e-6)
    assert 0 < f.phases_gb[fit.LOAD] < f.phases_gb[fit.STEP]


def test_the_oom_line_names_phase_step_measured_and_predicted(monkeypatch):
    f = fit_of(["--method", "lora", "--micro-batch", "8", "--global-batch", "32", "--no-grad-checkpointing"], H100)
    oom.configure(f, rank=1, world=2)
    monkeypatch.setitem(oom._state, "phase", fit.OPTIMIZER)
    monkeypatch.setitem(oom._state, "step", 3)
    exc = RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.1 GiB")
    line = oom.explain(exc, (80.24, 81.56))
    assert "\n" not in line
    assert line.startswith(f"CUDA out of memory in the optimizer step (step 3, rank 1 of 2, {f.gpu})")
    assert "measured peak 80.2 GB allocated, 81.6 GB reserved, 2.00 GiB more requested" in line
    assert f"the plan predicted {f.phases_gb[fit.OPTIMIZER]:.1f} GB allocated in this phase" in line
    assert f"{f.reserved_gb:.1f} GB reserved" in line and "What would fit: --micro-batch" in line
    oom.configure(None, rank=0, world=1)
    monkeypatch.setitem(oom._state, "step", None)
    bare = oom.explain(exc, None)
    assert bare.startswith("CUDA out of memory in the optimizer step:") and "no prediction" in bare


# -- train.py on CPU ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from tests.tiny_model import build_mistral_7b_config, build_tiny_mistral

    root = tmp_path_factory.mktemp("oom")
    build_tiny_mistral(root / "tiny")
    build_mistral_7b_config(root / "mistral-7b")  # config only: the refusal comes before any weight exists
    return root


def start(models: Path, out: Path, *extra: str, model: str = "tiny", **env: str) -> subprocess.Popen:
    """train.py in the background: runs that do not depend on each other start together (each spends most of its
    time importing, on one core of CI's two)."""
    cmd = [sys.executable, "train.py", "--model", str(models / model), "--init", "random", "--dataset", str(DATA),
           "--seq-len", "64", "--micro-batch", "2", "--global-batch", "4", "--max-steps", "4", "--warmup-steps", "1",
           "--output-dir", str(out), "--no-export", *extra]  # fmt: skip
    e = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1", **env)
    e["HF_DATASETS_CACHE"] = str(out.with_name(out.name + "-datasets"))  # runs side by side: an Arrow cache each
    return subprocess.Popen(cmd, cwd=ROOT, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def train(models: Path, out: Path, *extra: str, model: str = "tiny", **env: str) -> subprocess.CompletedProcess:
    return finish(start(models, out, *extra, model=model, **env))


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return [line for line in proc.stderr.splitlines() if "train.py: error:" in line]


@pytest.mark.slow(process_group=False)  # `python train.py`, one process each
def test_a_simulated_oom_exits_3_with_one_line_naming_the_phase(models, tmp_path):
    phases = [(fit.LOAD, None), (fit.STEP, 2), (fit.OPTIMIZER, 1)]
    gpu = f"{H200[0]}:{H200[1]}"
    procs = [start(models, tmp_path / phase.replace(" ", "-").replace("/", "-"),
                   TRAIN_TEST_OOM=phase if step is None else f"{phase}:{step}", TRAIN_TEST_GPU=gpu)
             for phase, step in phases]  # fmt: skip
    for (phase, step), proc in zip(phases, map(finish, procs), strict=True):
        assert proc.returncode == EXIT_OUT_OF_MEMORY, (phase, proc.stderr[-3000:])
        (line,) = error_lines(proc)
        where = f" (step {step}, " if step is not None else " ("
        assert f"CUDA out of memory in the {phase}{where}{H200[0]}" in line and "the plan predicted" in line, phase
        assert looks_oom(proc.stderr), phase  # plan --trial and the bench harnesses still record it as out of memory


@pytest.mark.slow(process_group=False)  # `python train.py`, one process each
def test_an_oom_during_a_save_never_becomes_latest_and_the_next_start_resumes_the_previous(models, tmp_path):
    out = tmp_path / "run"
    proc = train(models, out, "--save-every", "2", TRAIN_TEST_OOM=f"{fit.SAVE}:4")
    assert proc.returncode == EXIT_OUT_OF_MEMORY, proc.stderr[-3000:]
    (line,) = error_lines(proc)
    assert "CUDA out of memory in the checkpoint save (step 4)" in line
    assert (out / "latest").read_text().strip() == "step-00000002"
    assert not (out / "step-00000004").exists() and (out / ".tmp-step-00000004").is_dir()  # written, never sealed
    again = train(models, out, "--save-every", "2", "--resume")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "removed incomplete checkpoint" in again.stdout and not (out / ".tmp-step-00000004").exists()
    start = [json.loads(r) for r in (out / "train_log.jsonl").read_text().splitlines() if '"start"' in r][-1]
    assert Path(start["resumed_from"]).name == "step-00000002"
    assert (out / "latest").read_text().strip() == "step-00000004"


@pytest.mark.slow(process_group=False)  # `python train.py`, one process each
def test_a_run_the_plan_says_will_not_fit_is_refused_before_loading(models, tmp_path):
    gpu = f"{RTX4090[0]}:{RTX4090[1]}"
    proc = train(models, tmp_path / "run", "--seq-len", "512", model="mistral-7b", TRAIN_TEST_GPU=gpu)
    assert proc.returncode == EXIT_OUT_OF_MEMORY, proc.stderr[-3000:]
    (line,) = error_lines(proc)
    assert f"this run does not fit on {RTX4090[0]}" in line and "What would fit: " in line
    assert "trainable params" not in proc.stdout  # stopped before the model existed


@pytest.mark.slow(process_group=False)  # `python train.py`, one process each
def test_no_fit_check_runs_it_anyway_with_a_warning(models, tmp_path):
    tiny_gpu = f"{H200[0]}:0.5"  # less than the CUDA context alone: nothing fits
    both = start(models, tmp_path / "a", TRAIN_TEST_GPU=tiny_gpu), start(models, tmp_path / "b", "--no-fit-check",
                                                                        TRAIN_TEST_GPU=tiny_gpu)  # fmt: skip
    refused, proc = map(finish, both)
    assert refused.returncode == EXIT_OUT_OF_MEMORY and len(error_lines(refused)) == 1
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "running it anyway (--no-fit-check)" in proc.stdout
    first = json.loads((tmp_path / "b" / "train_log.jsonl").read_text().splitlines()[0])
    assert first["fit_check"]["fits"] is False and first["fit_check"]["seconds"] < 1.0
