"""train.py's tensor/context-parallel bookkeeping (training/parallel.py) and its one-line refusals."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from training.parallel import model_parallel_sizes, unsupported_reason

ROOT = Path(__file__).resolve().parent.parent
ON = {"ACCELERATE_USE_PARALLELISM_CONFIG": "true"}


def _args(**kw):
    base = dict(method="lora", liger=False, attn_implementation="sdpa", init="pretrained")
    return SimpleNamespace(**{**base, **kw})


def test_sizes_come_from_the_launchers_environment():
    assert model_parallel_sizes({**ON, "PARALLELISM_CONFIG_CP_SIZE": "8"}) == {"tp": 1, "cp": 8, "sp": 1}
    assert model_parallel_sizes({"PARALLELISM_CONFIG_TP_SIZE": "4"}) == {"tp": 1, "cp": 1, "sp": 1}  # not in use


def test_what_a_tp_or_cp_launch_refuses():
    cp, tp = {**ON, "PARALLELISM_CONFIG_CP_SIZE": "2"}, {**ON, "PARALLELISM_CONFIG_TP_SIZE": "2"}
    assert unsupported_reason(_args(), cp) is None and unsupported_reason(_args(), tp) is None
    assert unsupported_reason(_args(), {**ON, "PARALLELISM_CONFIG_DP_SHARD_SIZE": "4"}) is None  # HSDP
    assert "SDPA only" in unsupported_reason(_args(attn_implementation="flex_attention"), cp)
    assert "--init pretrained" in unsupported_reason(_args(init="random"), tp)
    assert "QLoRA" in unsupported_reason(_args(method="qlora"), cp)
    assert "--liger" in unsupported_reason(_args(liger=True), tp)
    assert "sp_size 2" in unsupported_reason(_args(), {**ON, "PARALLELISM_CONFIG_SP_SIZE": "2"})


def test_train_py_refuses_a_sequence_parallel_launch_in_one_line(tmp_path):
    env = {**ON, "PARALLELISM_CONFIG_SP_SIZE": "2", "PATH": "/usr/bin"}
    r = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "--model", "x", "--dataset", "y", "--output-dir", str(tmp_path / "o")],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "DeepSpeed sequence parallel" in r.stderr + r.stdout
