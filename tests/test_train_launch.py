"""train.py under real launchers on CPU: `accelerate launch` with 1 process and with 2 processes (DDP over gloo:
train.py passes Accelerator(cpu=True) when there is no GPU, without which torchrun's CPU workers would each train
alone), LoRA, preemption by SIGTERM, SIGKILL during a checkpoint save, and a torchrun elastic restart.

The Accelerate configs are written inline: CPU can run only the DDP-type configs (distributed_type NO / MULTI_GPU, which
on a machine without GPUs become single-process CPU / MULTI_CPU over gloo). FSDP, DeepSpeed ZeRO-1/2/3 and QLoRA need
GPUs (NCCL, CUDA kernels, bitsandbytes) and are exercised by the GPU benchmark runs, not here.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.teardown_probe import CLEAN, alive_at_end_training, probe_env

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "recipes" / "data" / "synthetic_instruct.jsonl"
STEPS = 8
CONFIG_1P = """compute_environment: LOCAL_MACHINE
distributed_type: 'NO'
num_processes: 1
num_machines: 1
mixed_precision: 'no'
use_cpu: true
"""
CONFIG_DDP2 = """compute_environment: LOCAL_MACHINE
distributed_type: MULTI_GPU
num_processes: 2
num_machines: 1
machine_rank: 0
gpu_ids: all
main_process_port: 0
mixed_precision: 'no'
use_cpu: false
"""


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    from tests.tiny_model import build_tiny_mistral

    root = tmp_path_factory.mktemp("train_launch")
    build_tiny_mistral(root / "tiny")
    (root / "1p.yaml").write_text(CONFIG_1P)
    (root / "ddp2.yaml").write_text(CONFIG_DDP2)
    return root


def train_args(work: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--model", str(work / "tiny"), "--init", "random", "--dataset", str(DATA), "--seq-len", "64",
        "--micro-batch", "2", "--global-batch", "8", "--lr", "3e-3", "--warmup-steps", "2", "--max-steps", str(STEPS),
        "--save-every", "2", "--keep-last", "2", "--output-dir", str(out), "--log-sample-ids", *extra,
    ]  # fmt: skip


def env(**extra: str) -> dict:
    # One thread per process: on a shared 2-core CI box, OpenMP spin-waiting made steps 10x slower than this.
    e = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    e["HF_DATASETS_CACHE"] = str(Path(os.environ.get("TMPDIR", "/tmp")) / "train_test_datasets_cache")
    e.update(extra)
    return e


def accelerate_cmd(config: Path, args: list[str]) -> list[str]:
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config), "train.py", *args]


def run(cmd: list[str], timeout: int = 240, **extra_env: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, env=env(**extra_env), capture_output=True, text=True, timeout=timeout)


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]


def steps(out: Path) -> dict[int, dict]:
    """Per-step records; a step repeated after a resume keeps its last record."""
    return {r["step"]: r for r in records(out) if "loss" in r}


def events(out: Path, name: str) -> list[dict]:
    return [r for r in records(out) if r.get("event") == name]


def wait_for(predicate, proc: subprocess.Popen, timeout: float = 400) -> None:
    deadline = time.time() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"process ended early with {proc.returncode}: {proc.stderr.read()[-3000:]}")
        if time.time() > deadline:
            raise AssertionError("timed out waiting for the run")
        time.sleep(0.05)


def logged_step(out: Path) -> int:
    try:
        return max(steps(out), default=0)
    except (FileNotFoundError, json.JSONDecodeError):  # the file is being appended to
        return 0


def train_workers(parent_pid: int) -> list:
    import psutil

    return [p for p in psutil.Process(parent_pid).children(recursive=True) if "train.py" in " ".join(p.cmdline())]


def _baseline(work, name: str, config: str, **extra_env: str):
    out = work / name
    proc = run(accelerate_cmd(work / config, train_args(work, out)), **extra_env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def baseline_1p(work):
    return _baseline(work, "base1", "1p.yaml")


@pytest.fixture(scope="module")
def baseline_ddp2(work):
    return _baseline(work, "base2", "ddp2.yaml", **probe_env(work / "teardown_probe", "train.py"))


def test_single_process_trains_logs_and_checkpoints(baseline_1p):
    start = events(baseline_1p, "start")[0]
    assert (start["world_size"], start["grad_accum"], start["strategy"]) == (1, 4, "ddp")
    s = steps(baseline_1p)
    assert sorted(s) == list(range(1, STEPS + 1))
    assert {"loss", "lr", "grad_norm", "tokens_per_s_per_gpu", "mfu", "max_mem_allocated_gb"} <= set(s[1])
    assert all(len(r["samples"]) == 8 for r in s.values())
    # loss visibly falls on the synthetic data
    assert s[STEPS]["loss"] < s[1]["loss"] - 0.5, [round(s[i]["loss"], 3) for i in sorted(s)]
    done = sorted(p.name for p in baseline_1p.glob("step-*"))
    assert done == ["step-00000006", "step-00000008"]  # --keep-last 2 pruned 2 and 4 once newer ones were complete
    assert (baseline_1p / "latest").read_text().strip() == "step-00000008"
    assert [e["pruned"] for e in events(baseline_1p, "checkpoint")] == [[], [], ["step-00000002"], ["step-00000004"]]
    summary = events(baseline_1p, "summary")[0]
    assert summary["steps"] == STEPS and summary["final_loss"] == s[STEPS]["loss"]


def test_ddp_two_processes_match_one_process(baseline_1p, baseline_ddp2):
    start = events(baseline_ddp2, "start")[0]
    assert start["distributed_type"] == "DistributedType.MULTI_CPU"  # two real gloo workers, not two lone trainers
    assert (start["world_size"], start["grad_accum"]) == (2, 2)
    one, two = steps(baseline_1p), steps(baseline_ddp2)
    assert [one[i]["samples"] for i in one] == [two[i]["samples"] for i in two]  # same global batches, same order
    # Same global batch and token-mean loss over it; only the float summation order differs (2 ranks x 2 micro-steps
    # vs 4 micro-steps). Measured: at most 2.4e-7 absolute over 8 steps (one fp32 ulp at loss ~3.5).
    for i in one:
        assert two[i]["loss"] == pytest.approx(one[i]["loss"], rel=1e-6, abs=1e-6), i


def test_ddp_wrapper_is_gone_before_the_process_group_is_destroyed(baseline_ddp2, work):
    assert alive_at_end_training(work / "teardown_probe") == {"rank0": CLEAN, "rank1": CLEAN}


def test_export_reloads_with_the_trained_weights(baseline_1p, work):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    exported = AutoModelForCausalLM.from_pretrained(str(baseline_1p / "final")).eval()
    trained = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(work / "tiny"))).eval()
    missing, unexpected = trained.load_state_dict(load_file(baseline_1p / "step-00000008" / "model.safetensors"), False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}
    tok = AutoTokenizer.from_pretrained(str(baseline_1p / "final"))
    ids = tok("### Instruction:\nadd 2 and 3\n\n### Response:\n", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(exported(ids).logits, trained(ids).logits, rtol=0, atol=0)


def test_sigterm_checkpoints_exits_75_and_resume_matches(baseline_1p, work):
    out = work / "preempt"
    cmd = accelerate_cmd(work / "1p.yaml", train_args(work, out))
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env(TRAIN_TEST_STEP_DELAY="0.3"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    wait_for(lambda: logged_step(out) >= 3, proc)
    for worker in train_workers(proc.pid):
        worker.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert "exit status 75" in err  # accelerate launch reports the worker's code, then exits 1 itself
    stopped = events(out, "preempted")[0]
    assert stopped["exit_code"] == 75 and stopped["signal"] == signal.SIGTERM
    at = stopped["step"]
    assert 3 <= at < STEPS and (out / "latest").read_text().strip() == f"step-{at:08d}"

    resumed = run(accelerate_cmd(work / "1p.yaml", train_args(work, out, "--resume")))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert events(out, "start")[-1]["resumed_from"].endswith(f"step-{at:08d}")
    base, got = steps(baseline_1p), steps(out)
    assert [got[i]["samples"] for i in sorted(got)] == [base[i]["samples"] for i in sorted(base)]  # none seen twice
    for i in base:
        assert got[i]["loss"] == pytest.approx(base[i]["loss"], rel=1e-6, abs=1e-6), i


def test_kill_during_save_keeps_previous_checkpoint(baseline_1p, work):
    out = work / "killsave"
    cmd = accelerate_cmd(work / "1p.yaml", train_args(work, out))
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env(TRAIN_TEST_SLOW_SAVE="6:60"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    partial = out / ".tmp-step-00000006"
    wait_for(lambda: (partial / "model.safetensors").exists() and events(out, "save_begin")[-1]["step"] == 6, proc)
    time.sleep(0.5)  # well inside the hooked pause between writing the files and publishing them
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert partial.exists() and not (out / "step-00000006").exists()
    assert (out / "latest").read_text().strip() == "step-00000004"
    assert (out / "step-00000004" / "trainer_state.json").is_file()

    resumed = run(accelerate_cmd(work / "1p.yaml", train_args(work, out, "--resume")))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "removed incomplete checkpoint" in resumed.stdout and not partial.exists()
    assert events(out, "start")[-1]["resumed_from"].endswith("step-00000004")
    base, got = steps(baseline_1p), steps(out)
    assert got[STEPS]["loss"] == pytest.approx(base[STEPS]["loss"], rel=1e-6, abs=1e-6)


def test_torchrun_elastic_restart_reaches_the_same_loss(baseline_ddp2, work):
    out = work / "elastic"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "--max_restarts",
           "1", "train.py", *train_args(work, out, "--resume")]  # fmt: skip
    # torchrun's shared rendezvous store keeps round 1's gloo peer addresses; a restarted rank can read a dead peer's
    # address before the new one overwrites it ("Connection refused"). A fresh store per round avoids that race.
    run_env = env(TRAIN_TEST_STEP_DELAY="0.3", TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=run_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        wait_for(lambda: (out / "step-00000004").is_dir() and logged_step(out) >= 5, proc)
        victim = [w for w in train_workers(proc.pid) if w.environ().get("LOCAL_RANK") == "1"]
        assert len(victim) == 1
        victim[0].kill()
        _, err = proc.communicate(timeout=240)
    finally:  # a failed or timed-out run must not leave torchrun and its workers behind
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err[-3000:]
    starts = events(out, "start")
    assert len(starts) == 2 and starts[1]["resumed_from"] is not None  # one restart, from a checkpoint
    base, got = steps(baseline_ddp2), steps(out)
    assert got[STEPS]["loss"] == pytest.approx(base[STEPS]["loss"], rel=1e-6, abs=1e-6)
    assert [got[i]["samples"] for i in sorted(got)] == [base[i]["samples"] for i in sorted(base)]


def test_lora_ddp_trains_and_exports_adapter(work):
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    out = work / "lora"
    args = train_args(work, out, "--method", "lora", "--lora-r", "4", "--lora-alpha", "8", "--max-steps", "4")
    args[args.index("--init") + 1] = "pretrained"
    args[args.index("--lr") + 1] = "1e-2"
    proc = run(accelerate_cmd(work / "ddp2.yaml", args))
    assert proc.returncode == 0, proc.stderr[-3000:]
    start = events(out, "start")[0]
    assert start["world_size"] == 2 and 0 < start["trainable_params"] < start["params"] // 2
    s = steps(out)
    assert s[4]["loss"] < s[1]["loss"]
    adapter = out / "final"
    assert (adapter / "adapter_model.safetensors").is_file() and not (adapter / "model.safetensors").exists()
    base = AutoModelForCausalLM.from_pretrained(str(work / "tiny")).eval()
    ids = torch.tensor([[1, 20, 30, 40, 50]])
    with torch.no_grad():
        before = base(ids).logits
        tuned = PeftModel.from_pretrained(base, str(adapter)).eval()
        after = tuned(ids).logits
    assert not torch.allclose(before, after)  # the adapter carries trained, non-zero B matrices
    ckpt = load_file(out / "step-00000004" / "model.safetensors")
    saved = load_file(adapter / "adapter_model.safetensors")
    for key, value in saved.items():
        torch.testing.assert_close(ckpt[key.replace(".weight", ".default.weight")], value, rtol=0, atol=0)


@pytest.mark.parametrize("saved, resumed_on", [("base1", "ddp2.yaml"), ("base2", "1p.yaml")])
def test_ddp_checkpoint_resumes_on_another_number_of_processes(baseline_1p, baseline_ddp2, work, saved, resumed_on):
    """A job preempted at step 6 and requeued onto 2 processes from 1, or 1 from 2 (issue 19 item 15): DDP's whole
    state loads and the data position is in samples, so steps 7 and 8 see the same batches and reach the same loss as
    the uninterrupted run (within the 1e-6 the 1- and 2-process runs agree to, above)."""
    import shutil

    out = work / f"requeue-{saved}-{resumed_on}"
    out.mkdir()
    shutil.copytree(work / saved / "step-00000006", out / "step-00000006")
    (out / "latest").write_text("step-00000006\n")
    resumed = run(accelerate_cmd(work / resumed_on, train_args(work, out, "--resume")))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    world = 2 if resumed_on == "ddp2.yaml" else 1
    assert f"written on {3 - world} process(es) on {world}" in resumed.stdout
    start = events(out, "start")[-1]
    assert start["world_size"] == world and start["resumed_from"].endswith("step-00000006")
    base, got = steps(work / saved), steps(out)
    assert sorted(got) == [7, 8]
    for i in (7, 8):
        assert got[i]["samples"] == base[i]["samples"], i
        assert got[i]["loss"] == pytest.approx(base[i]["loss"], rel=1e-6, abs=1e-6), i
