"""What both GPU harnesses (run_matrix.py, sweep.py) share: the launch environment, the versions a results file
records, the offline Mistral-7B directory, and the atomic results write."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache
from pathlib import Path

from generator.fileio import atomic_write

REPO = Path(__file__).resolve().parent.parent
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
"""Never NVLink multicast on the lent machines (device README): every launched process gets these."""


BENCH_MODELS = REPO / "bench" / "models"
"""Public configs (config.json as published, `_source` naming it) of models no generator preset holds, so neither the
planner's presets nor any probe --compute row has their shapes: the held-out check that a model the user names by
its config is priced from the operators alone (bench/families.py UNSEEN_MODELS)."""


@cache
def _bench_model_text(name: str) -> str | None:
    path = BENCH_MODELS / f"{name}.json"
    return path.read_text() if path.is_file() else None


def bench_model_config(name: str) -> dict | None:
    """A bench model's config dict (provenance keys dropped; a fresh copy each call), or None when `name` is not one.
    The file is read once: the report asks for every row's model."""
    text = _bench_model_text(name)
    if text is None:
        return None
    return {k: v for k, v in json.loads(text).items() if not k.startswith("_")}


def versions() -> dict:
    out = {}
    code = (
        "import json, torch, accelerate, transformers\n"
        "v = dict(torch=torch.__version__, accelerate=accelerate.__version__, transformers=transformers.__version__,"
        " cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,"
        " gpu_count=torch.cuda.device_count(),"
        " nccl='.'.join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None)\n"
        "import importlib.metadata as md\n"
        "for name in ('deepspeed', 'peft', 'torchao', 'liger-kernel', 'trl', 'bitsandbytes'):\n"
        "    try:\n        v[name] = md.version(name)\n    except Exception:\n        v[name] = None\n"
        "print(json.dumps(v))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    if res.returncode == 0:
        out.update(json.loads(res.stdout.strip().splitlines()[-1]))
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    out["driver"] = smi.stdout.strip().splitlines()[0] if smi.returncode == 0 and smi.stdout.strip() else None
    return out


def model_dir(workdir: Path, preset: str = "mistral-7b", layers: int | None = None) -> Path:
    """A preset's config.json (cut to its first `layers` decoder layers) plus a locally built tokenizer: what
    --init random needs with no hub access. Mistral-7B keeps the directory and builder the committed rows used."""
    out = workdir / (preset if layers is None else f"{preset}-l{layers}")
    if not (out / "config.json").exists():
        how = ["mistral-7b"] if preset == "mistral-7b" and layers is None else ["preset", preset]
        cut = [] if layers is None else ["--layers", str(layers)]
        subprocess.run([sys.executable, "tests/tiny_model.py", *how, str(out), *cut], cwd=REPO, check=True, timeout=300)
    return out


def save(results: dict, *paths: Path) -> None:
    text = json.dumps(results, indent=1, sort_keys=True)
    for path in paths:
        atomic_write(path, text, force=True)
