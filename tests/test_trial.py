"""`plan --trial`: the whole flow on CPU with the tiny model (two micro-batch candidates, real accelerate launch), an
out-of-memory trial followed by one that runs, Ctrl-C killing the trial's process group, and the calibration file
correcting later plans."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from generator.cli import main
from generator.model import load_model
from generator.plan.planner import make_plan, ranked_candidates
from generator.plan.types import PlanRequest
from generator.topology.machines import load_machine

ROOT = Path(__file__).resolve().parents[1]
# Kernels pinned: these tests are about the trial's mechanics, not the kernel choice (tests/test_plan_kernels.py).
TINY_PLAN = ["--machine", "h200-sxm-2", "--num-gpus", "1", "--strategy", "ddp", "--grad-checkpointing", "off",
             "--attention", "sdpa", "--no-liger"]  # fmt: skip
SDPA = {"attention": "sdpa", "liger": False}
FAKE_LAUNCHER = textwrap.dedent(
    """
    # Stands in for `accelerate launch`: micro-batch 8 runs out of memory, others log 6 steps (faster for smaller
    # micro-batches); with FAKE_HANG set it starts a grandchild and waits, for the Ctrl-C test.
    import json, os, subprocess, sys, time
    argv = sys.argv[1:]
    val = lambda flag: argv[argv.index(flag) + 1]
    if os.environ.get("FAKE_HANG"):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        open(os.environ["FAKE_HANG"], "w").write(f"{os.getpid()} {child.pid}")
        time.sleep(300)
    micro = int(val("--micro-batch"))
    if micro == 8:
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", flush=True)
        sys.exit(1)
    with open(val("--log-file"), "w") as f:
        f.write(json.dumps({"event": "start"}) + "\\n")
        for step in range(1, 7):
            rec = {"step": step, "loss": 1.0, "lr": 1e-5, "step_time_s": 0.1 * micro,
                   "tokens_per_s_per_gpu": 1000.0 / micro, "mfu": 0.1,
                   "max_mem_allocated_gb": [10.0 * micro], "max_mem_reserved_gb": [12.0 * micro]}
            f.write(json.dumps(rec) + "\\n")
    """
)


def cli(*args: str, env: dict | None = None, cwd: Path = ROOT, **kw) -> subprocess.CompletedProcess:
    e = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", **(env or {}))
    e["PYTHONPATH"] = str(ROOT)
    cmd = [sys.executable, "-m", "generator", "plan", *args]
    return subprocess.run(cmd, cwd=cwd, env=e, capture_output=True, text=True, **kw)


def config_dir(tmp_path: Path) -> str:
    """A --model-dir the up-front load check accepts (config.json and a tokenizer file); the fake launcher loads
    nothing from it."""
    d = tmp_path / "model"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text("{}")
    (d / "tokenizer_config.json").write_text("{}")
    return str(d)


def fake_env(tmp_path: Path) -> dict:
    fake = tmp_path / "fake_launch.py"
    fake.write_text(FAKE_LAUNCHER)
    return {"DCG_TRIAL_LAUNCHER": f"{sys.executable} {fake}"}


@pytest.mark.slow
def test_cpu_trial_writes_the_measured_fastest_and_records_both(tmp_path):
    from tests.tiny_model import build_tiny_mistral

    tiny = build_tiny_mistral(tmp_path / "tiny")
    cal, out = tmp_path / "cal.json", tmp_path / "best.yaml"
    r = cli("--model", str(tiny), *TINY_PLAN, "--seq-len", "64", "--trial", "--top", "2", "--trial-steps", "6",
            "--trial-device", "cpu", "--model-dir", str(tiny), "--calibration-file", str(cal), "--output", str(out),
            "--json", timeout=240)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    records = json.loads(cal.read_text())["measurements"]
    assert len(records) == 2 and {m["status"] for m in records} == {"ok"}
    assert {m["device"] for m in records} == {"cpu"}
    assert {m["micro_batch"] for m in records} == {8, 4}
    assert all(m["measured_tokens_per_s_per_gpu"] > 0 and m["measured_steps"] == 6 for m in records)
    best = max(records, key=lambda m: m["measured_tokens_per_s_per_gpu"])
    text = out.read_text()
    assert yaml.safe_load(text)["use_cpu"] is False  # the GPU plan is written; only the trial configs ran on CPU
    assert f"--micro-batch {best['micro_batch']} " in text  # the launch line in the header
    assert "Trial (measured" in text and "run on CPU" in text and "<- written" in text
    assert json.loads(r.stdout[r.stdout.index("{") :])["micro_batch"] == best["micro_batch"]


def test_out_of_memory_is_reported_and_the_next_candidate_runs(tmp_path):
    cal, out = tmp_path / "cal.json", tmp_path / "best.yaml"
    r = cli("--model", "mistral-7b", "--machine", "h200-sxm-2", "--num-gpus", "1", "--strategy", "ddp",
            "--attention", "sdpa", "--grad-checkpointing", "off", "--seq-len", "256", "--precision", "bf16", "--trial",
            "--top", "3",
            "--calibration-file", str(cal), "--model-dir", config_dir(tmp_path), "--output", str(out),
            env=fake_env(tmp_path), timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr + r.stdout
    assert "trial 1/3: ddp on GPUs 0, micro-batch 8" in r.stdout
    assert "does not fit (measured)" in r.stdout
    records = json.loads(cal.read_text())["measurements"]
    assert [m["status"] for m in records] == ["oom", "ok", "ok"]
    assert [m["micro_batch"] for m in records] == [8, 4, 2]
    # The fake's micro-batch 4 logs 250 tokens/s/GPU, micro-batch 2 logs 500: the faster one is written.
    assert records[2]["measured_tokens_per_s_per_gpu"] == 500.0 and records[2]["measured_peak_reserved_gb"] == 24.0
    text = out.read_text()
    assert "--micro-batch 2 " in text and "micro-batch 8 x accum 1, checkpointing off: does not fit (measured)" in text
    assert "measured 500 tokens/s/GPU, 0.200 s/step, 24.0 GB reserved (median of 3 steps after 3 warm-up)" in r.stdout
    assert "measured 500 tokens/s/GPU" in text and "NOT the planner's first choice" in r.stdout


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"  # a killed orphan may wait as a zombie when the container's init does not reap


def _sigint_as_in_a_terminal():
    """The plan runs with Ctrl-C delivered and default, as from a terminal. A suite started in the background of a
    non-interactive shell runs with SIGINT and SIGQUIT ignored (POSIX: `cmd &` without job control; under `nohup`
    SIGHUP too: SigIgn 0x7, as the xdist worker read), every process of it inherits that, and the plan below would
    never see the signal this test sends."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_kills_the_trial_process_group(tmp_path):
    pids = tmp_path / "pids"
    env = {**fake_env(tmp_path), "FAKE_HANG": str(pids)}
    e = dict(os.environ, PYTHONPATH=str(ROOT), **env)
    cmd = [sys.executable, "-m", "generator", "plan", "--model", "mistral-7b", "--machine", "h200-sxm-2",
           "--num-gpus", "1", "--seq-len", "256", "--trial", "--calibration-file", str(tmp_path / "cal.json"),
           "--model-dir", config_dir(tmp_path), "--output", str(tmp_path / "x.yaml")]  # fmt: skip
    parent = subprocess.Popen(
        cmd, cwd=ROOT, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=_sigint_as_in_a_terminal
    )
    try:
        deadline = time.monotonic() + 60
        while not (pids.exists() and len(pids.read_text().split()) == 2):
            assert time.monotonic() < deadline and parent.poll() is None, parent.stdout.read().decode()
            time.sleep(0.1)
        launcher, grandchild = (int(p) for p in pids.read_text().split())
        assert _alive(launcher) and _alive(grandchild)
        parent.send_signal(signal.SIGINT)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 10
        while (_alive(launcher) or _alive(grandchild)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(launcher) and not _alive(grandchild)
        assert parent.returncode != 0
        assert not (tmp_path / "x.yaml").exists()
    finally:
        if parent.poll() is None:
            parent.kill()


def test_ranked_candidates_start_with_the_plan_and_are_distinct():
    topo, model = load_machine("hgx-h200-8"), load_model("mistral-7b")
    request = PlanRequest(seq_len=2048, **SDPA)
    plans = ranked_candidates(topo, model, request, top=4)
    assert plans[0] == make_plan(topo, model, request)
    keys = {
        (p.strategy, p.gpu_ids, p.workload.micro_batch, p.workload.grad_checkpointing, p.workload.attention)
        for p in plans
    }
    assert len(plans) == len(keys) == 4
    assert all(p.estimate.fits for p in plans)
    assert len(ranked_candidates(topo, model, request, top=1)) == 1


def test_calibration_corrects_later_plans_and_resets(tmp_path, capsys):
    base = ["plan", "--model", "mistral-7b", "--machine", "h200-sxm-2", "--num-gpus", "2", "--strategy", "fsdp",
            "--seq-len", "4096", "--attention", "sdpa", "--no-liger", "--json"]  # fmt: skip
    cal = tmp_path / "cal.json"
    assert main([*base, "--calibration-file", str(cal)]) == 0
    raw = json.loads(capsys.readouterr().out)["chosen"]
    record = {"device": "cuda", "status": "ok", "gpu_name": "NVIDIA H200", "strategy": "fsdp",
              "method": "full", "seq_len": 4096,
              "predicted_tokens_per_s_per_gpu": 1000.0, "measured_tokens_per_s_per_gpu": 800.0}  # fmt: skip
    cpu = {**record, "device": "cpu", "measured_tokens_per_s_per_gpu": 1.0}  # CPU trials never calibrate GPUs
    cal.write_text(json.dumps({"version": 1, "measurements": [record, cpu]}))
    assert main([*base, "--calibration-file", str(cal)]) == 0
    corrected = json.loads(capsys.readouterr().out)["chosen"]
    assert corrected["tokens_per_s_per_gpu"] == pytest.approx(0.8 * raw["tokens_per_s_per_gpu"], rel=1e-3)
    assert corrected["step_s"] == pytest.approx(raw["step_s"] / 0.8, rel=1e-3)
    assert corrected["reserved_gb"] == raw["reserved_gb"]
    assert main(["plan", "--reset-calibration", "--calibration-file", str(cal)]) == 0
    assert not cal.exists() and "removed" in capsys.readouterr().out


def test_wizard_trial_question_only_with_a_detected_gpu_and_writes_the_fastest(tmp_path, monkeypatch):
    from generator.trial.wizard import trial_accepted
    from generator.wizard import questions as q

    spec = next(s for s in q.QUESTIONS if s.key == "trial")
    assert not spec.when({"_live": None, "machine": "h200-sxm-2", "num_machines": 1})
    assert spec.when({"_live": object(), "machine": q.LIVE, "num_machines": 1})
    for k, v in fake_env(tmp_path).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr("generator.trial.loadable._problem", lambda target: None)  # the fake loads no model
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    topo, model = load_machine("h200-sxm-2"), load_model("mistral-7b")
    request = PlanRequest(
        seq_len=256, num_gpus=1, strategy="ddp", grad_checkpointing="off", micro_batch=4, attention="sdpa"
    )
    accepted = make_plan(topo, model, request)
    lines = []
    console = type("C", (), {"print": lambda self, text, **kw: lines.append(text)})()
    best, notes = trial_accepted(
        topo, model, PlanRequest(seq_len=256, grad_checkpointing="off", attention="sdpa"), accepted, console
    )
    assert "trial 1/3: ddp on GPUs 0, micro-batch 4" in lines[0]  # the accepted plan is trialled first
    assert best.workload.micro_batch == 2 and notes[0].startswith("Trial (measured")
    records = json.loads((tmp_path / "cache" / "dist-config-generator" / "calibration.json").read_text())
    assert len(records["measurements"]) == 3


def test_a_model_dir_without_weights_trials_its_architecture_with_random_weights(tmp_path):
    from generator.trial.runner import TrialOptions, trial_args

    plan = make_plan(load_machine("h200-sxm-2"), load_model("mistral-7b"), PlanRequest(seq_len=512, num_gpus=2, **SDPA))
    config_only, weights = tmp_path / "config-only", tmp_path / "weights"
    config_only.mkdir()
    weights.mkdir()
    (config_only / "config.json").write_text("{}")
    (weights / "model.safetensors").write_bytes(b"")

    def argv(model_dir):
        return trial_args(plan, TrialOptions(4, None, model_dir, None, "cuda"), tmp_path, "c", tmp_path / "log")

    assert argv(str(config_only))[argv(str(config_only)).index("--model") + 1] == str(config_only)
    assert "--init" in argv(str(config_only)) and "--init" not in argv(str(weights))
    assert argv(None)[argv(None).index("--init") + 1] == "random"
    assert "--init" not in argv("mistralai/Mistral-7B-v0.1")  # a hub id is fetched with its weights


def test_trial_without_a_gpu_is_refused_before_any_trial_runs(tmp_path, monkeypatch, capsys):
    from dataclasses import replace

    from generator.cli import main
    from generator.topology import detect

    fallback = replace(load_machine("h200-sxm-2"), warnings=("no NVIDIA GPU detected (test)",))
    monkeypatch.setattr(detect, "detect_live", lambda: fallback)
    cal = tmp_path / "cal.json"
    argv = ["plan", "--model", "mistral-7b", "--trial", "--calibration-file", str(cal), "--output", str(tmp_path / "o")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no NVIDIA GPU was detected" in err and "--trial-device cpu" in err and err.count("\n") == 1
    assert not cal.exists() and not (tmp_path / "o").exists()
