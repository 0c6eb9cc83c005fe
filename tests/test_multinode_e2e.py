"""Two "machines" on one host: the generator writes a 2-machine config and launch command, and two `accelerate launch`
processes (machine ranks 0 and 1, one process each) rendezvous on loopback and train the tiny model with train.py.

CPU only. Nothing in the generated YAML is changed for CPU: DDP's MULTI_GPU config becomes MULTI_CPU over gloo inside
train.py (Accelerator(cpu=True) when there is no GPU), `gpu_ids` is ignored without CUDA and bf16 autocast runs on
CPU. Only the emitted command is adapted: its `CUDA_DEVICE_ORDER=` prefix goes into the environment, `accelerate` is
run as `python -m accelerate.commands.launch`, and each machine gets its own --machine_rank.

GPU-only (not exercised here): the recipes' HSDP/FSDP and DeepSpeed multi-node configs (NCCL, CUDA) and the SLURM
script under a real `srun` (tests/test_emit_slurm.py runs it with a stub srun).

Agreement: the loss train.py logs is all-reduced over ranks, so both ranks compute the same number; the test checks
that this number equals a one-process run of the same global batch (with gradient accumulation), which holds only if
rank 1 trained on its half of every batch with gradients synchronised with rank 0, and that both launchers exit 0.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from generator.cli import main as generator_main

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "recipes" / "data" / "synthetic_instruct.jsonl"
STEPS = 4
EXTRA = ["--init", "random", "--dataset", str(DATA), "--max-steps", str(STEPS), "--warmup-steps", "1", "--lr", "3e-3"]
EXTRA += ["--no-export"]
LAUNCH_TIMEOUT_S = 180  # about 15 s here; CI's two cores run the rest of the suite's leftovers too


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env() -> dict:
    e = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    e["HF_DATASETS_CACHE"] = str(Path(os.environ.get("TMPDIR", "/tmp")) / "train_test_datasets_cache")
    e["CUDA_VISIBLE_DEVICES"] = ""  # CPU even where a GPU exists: this is the CPU test
    return e


def plan(tmp: Path, name: str, *args: str) -> tuple[Path, list[str]]:
    """Run `python -m generator plan` in-process; return the config path and the launch command's words."""
    config = tmp / f"{name}.yaml"
    # bf16: the processes run on CPU, where train.py refuses float8 (auto may pick it for the H200 it plans for)
    argv = ["plan", "--model", str(tmp / "tiny"), "--machine", "h200-sxm-2", "--num-gpus", "1", "--strategy", "ddp",
            "--precision", "bf16"]  # fmt: skip
    argv += ["--seq-len", "64", "--micro-batch", "2", "--global-batch", "8", *args, "--output", str(config), "--json"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert generator_main(argv) == 0
    words = shlex.split(json.loads(out.getvalue())["launch_command"])
    assert words[0] == "CUDA_DEVICE_ORDER=PCI_BUS_ID" and words[1:3] == ["accelerate", "launch"]
    return config, [sys.executable, "-m", "accelerate.commands.launch", *words[3:]]


def with_rank(cmd: list[str], rank: int) -> list[str]:
    i = cmd.index("--machine_rank")
    return [*cmd[: i + 1], str(rank), *cmd[i + 2 :]]


def tails(logs: list[Path]) -> str:
    return "\n".join(f"--- machine rank {r}:\n{log.read_text()[-2500:]}" for r, log in enumerate(logs))


def losses(out: Path) -> tuple[dict, list[float]]:
    recs = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    start = next(r for r in recs if r.get("event") == "start")
    return start, [r["loss"] for r in recs if "loss" in r]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tests.tiny_model import build_tiny_mistral

    tmp = tmp_path_factory.mktemp("multinode")
    build_tiny_mistral(tmp / "tiny")
    return tmp


def test_two_machines_on_loopback_train_and_agree_with_one_process(tiny):
    port = free_port()
    config, cmd = plan(
        tiny, "two", "--num-machines", "2", "--main-process-ip", "127.0.0.1", "--main-process-port", str(port),
        "--fabric", "eth-25g",
    )  # fmt: skip
    text = config.read_text()
    assert "num_machines: 2" in text and "num_processes: 2" in text and f"main_process_port: {port}" in text
    assert (tiny / "two.slurm.sh").exists()
    assert cmd[cmd.index("--rdzv_backend") + 1] == "static" and "--same_network" in cmd

    # Each launcher writes to its own file and reads /dev/null: waiting on one rank's pipe while the other's fills
    # would stall that rank inside a collective (a deadlock, not a failure), and a runner with no standard input
    # would otherwise hand one launcher the other's pipe as its stdin (CI runs with none).
    logs = [tiny / f"launcher{rank}.log" for rank in (0, 1)]
    procs = []
    for rank, log in zip((0, 1), logs, strict=True):
        with log.open("w") as sink:
            procs.append(subprocess.Popen(
                [*with_rank(cmd, rank), *EXTRA, "--output-dir", str(tiny / f"out{rank}")], cwd=ROOT, env=env(),
                stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
            ))  # fmt: skip
    deadline = time.monotonic() + LAUNCH_TIMEOUT_S
    try:
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pytest.fail(f"the two launchers did not finish in {LAUNCH_TIMEOUT_S} s:\n" + tails(logs))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for rank, p in enumerate(procs):
        assert p.returncode == 0, f"machine rank {rank} exited {p.returncode}:\n" + tails(logs)
    assert "summary" in logs[0].read_text()  # rank 0 finished the loop and printed the summary
    start, multi = losses(tiny / "out0")
    assert (start["world_size"], start["grad_accum"]) == (2, 2)
    assert len(multi) == STEPS

    # one process, same global batch through 4 accumulation steps
    _, single_cmd = plan(tiny, "one")
    proc = subprocess.run(
        [*single_cmd, *EXTRA, "--output-dir", str(tiny / "single")], cwd=ROOT, env=env(), capture_output=True,
        stdin=subprocess.DEVNULL, text=True, timeout=LAUNCH_TIMEOUT_S,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    start1, single = losses(tiny / "single")
    assert (start1["world_size"], start1["grad_accum"]) == (1, 4)
    assert multi == pytest.approx(single, rel=2e-3)  # bf16 autocast; sums over ranks in another order
    assert multi[-1] < multi[0]
