"""Out of memory on a real GPU (issue 27; needs CUDA, skipped else; bench/gpu_tests.sh runs it on the device): a
micro-batch the plan says will not fit is refused before loading, and forced with --no-fit-check it runs out of memory
and says so in one line with exit 3; a run that fits is not refused, and the check takes well under a second.
Mistral-7B's widths cut down to 8 layers (tests/tiny_model.py), random init, one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cuda_mark import needs_cuda
from training import fit
from training.args import parse_args
from training.errors import EXIT_OUT_OF_MEMORY

pytestmark = [pytest.mark.slow, needs_cuda]
ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "recipes" / "data" / "synthetic_instruct.jsonl"
TOO_BIG = ["--method", "lora", "--seq-len", "4096", "--micro-batch", "64", "--global-batch", "64",
           "--no-grad-checkpointing"]  # fmt: skip
FITS = ["--method", "lora", "--seq-len", "512", "--micro-batch", "1", "--global-batch", "2"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from tests.tiny_model import build_mistral_7b_config

    return build_mistral_7b_config(tmp_path_factory.mktemp("oom_gpu") / "mistral-8l", layers=8)


def train(model: Path, out: Path, *flags: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "train.py", "--model", str(model), "--init", "random", "--dataset", str(DATA),
           "--max-steps", "2", "--warmup-steps", "1", "--output-dir", str(out), "--no-export", *flags]  # fmt: skip
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def error_line(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    (line,) = [x for x in proc.stderr.splitlines() if "train.py: error:" in x]
    return line


def verdict(model: Path, flags: list[str]):
    from generator.model import spec_from_config

    args = parse_args(["--model", str(model), *flags])
    spec = spec_from_config(json.loads((model / "config.json").read_text()), str(model))
    request = fit.plan_request(args, "ddp", 1, 1, args.grad_checkpointing, None, False)
    return fit.check_fit(spec, request, 1, fit.visible_gpu())


def test_a_micro_batch_the_plan_says_will_not_fit_is_refused_before_loading(model, tmp_path):
    assert not verdict(model, TOO_BIG).fits
    proc = train(model, tmp_path / "run", *TOO_BIG)
    assert proc.returncode == EXIT_OUT_OF_MEMORY, proc.stderr[-4000:]
    line = error_line(proc)
    assert "this run does not fit on" in line and "What would fit: --micro-batch" in line
    assert "trainable params" not in proc.stdout  # no model was built


def test_forced_it_runs_out_of_memory_and_explains_itself_in_one_line(model, tmp_path):
    proc = train(model, tmp_path / "run", *TOO_BIG, "--no-fit-check")
    assert proc.returncode == EXIT_OUT_OF_MEMORY, proc.stderr[-4000:]
    line = error_line(proc)
    assert "CUDA out of memory in the forward/backward (step 1, " in line, line
    assert "measured peak" in line and "GB reserved" in line and "the plan predicted" in line
    assert "What would fit: --micro-batch" in line
    assert "running it anyway (--no-fit-check)" in proc.stdout


def test_a_run_that_fits_is_not_refused_and_the_check_is_fast(model, tmp_path):
    proc = train(model, tmp_path / "run", *FITS)
    assert proc.returncode == 0, proc.stderr[-4000:]
    start = json.loads((tmp_path / "run" / "train_log.jsonl").read_text().splitlines()[0])
    assert start["fit_check"]["fits"] is True and start["fit_check"]["seconds"] < 1.0, start["fit_check"]
