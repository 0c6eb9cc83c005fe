"""The local calibration file: every trial measurement, and the per-(GPU name, strategy) correction later `plan` calls
apply to their predictions.

Format (JSON): {"version": 1, "measurements": [{...one trial...}, ...]}. The correction for (gpu_name, strategy) is the
median of measured / predicted tokens/s per GPU over that pair's successful GPU trials (CPU trials are recorded but
never used: a CPU run says nothing about a GPU's speed). Predicted tokens/s and MFU are multiplied by it and the
step time divided by it; memory predictions are left alone. Pure JSON: no torch on the planning path.
Reset with `python -m generator plan --reset-calibration` (or delete the file).
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import replace
from pathlib import Path

from generator.errors import UserError
from generator.fileio import atomic_write

VERSION = 1


def default_path() -> Path:
    """$XDG_CACHE_HOME/dist-config-generator/calibration.json (default ~/.cache/...)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dist-config-generator" / "calibration.json"


def load(path: str | Path) -> list[dict]:
    """The recorded measurements; [] when the file does not exist."""
    p = Path(path)
    if not p.exists():
        return []
    try:
        data = json.loads(p.read_text())
        measurements = data["measurements"]
        if not isinstance(measurements, list):
            raise TypeError
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(f"calibration file {p} is unreadable; fix or remove it (plan --reset-calibration)") from None
    return [m for m in measurements if isinstance(m, dict)]


def append(path: str | Path, records: list[dict]) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"version": VERSION, "measurements": load(p) + records}, indent=2) + "\n"
    return atomic_write(p, text, True)


def reset(path: str | Path) -> bool:
    """Remove the file; True if there was one."""
    p = Path(path)
    if p.exists():
        p.unlink()
        return True
    return False


def factors(measurements: list[dict]) -> dict[tuple[str, str], float]:
    """(gpu_name, strategy) -> median measured/predicted tokens/s ratio over successful GPU trials."""
    ratios: dict[tuple[str, str], list[float]] = {}
    for m in measurements:
        measured, predicted = m.get("measured_tokens_per_s_per_gpu"), m.get("predicted_tokens_per_s_per_gpu")
        if m.get("device") != "cuda" or m.get("status") != "ok" or not measured or not predicted:
            continue
        ratios.setdefault((str(m.get("gpu_name")), str(m.get("strategy"))), []).append(measured / predicted)
    return {k: statistics.median(v) for k, v in ratios.items()}


def correct(estimate, factor: float):
    """The estimate with its speed scaled by the measured/predicted factor (memory untouched), and a note saying so."""
    note = f"speed corrected by x{factor:.2f} from this machine's calibration file (measured/predicted)"
    return replace(
        estimate,
        tokens_per_s_per_gpu=estimate.tokens_per_s_per_gpu * factor,
        mfu=estimate.mfu * factor,
        step_s=estimate.step_s / factor,
        compute_s=estimate.compute_s / factor,
        comm_s=estimate.comm_s / factor,
        notes=(*estimate.notes, note),
    )


def calibrated_engines(engines, table: dict[tuple[str, str], float]):
    """`engines` whose estimates carry the calibration correction, so the planner ranks on corrected speeds."""
    if not table:
        return engines
    inner = engines.estimate_all

    def estimate_all(model, workload, placement, *args, **kwargs):
        out = inner(model, workload, placement, *args, **kwargs)
        return [
            correct(e, table[(placement.gpu_name, e.strategy)]) if (placement.gpu_name, e.strategy) in table else e
            for e in out
        ]

    return replace(engines, estimate_all=estimate_all)
