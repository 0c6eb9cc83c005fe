"""The local calibration file: every trial measurement, and the per-workload correction later `plan` calls apply to
their predictions.

Format (JSON): {"version": 1, "measurements": [{...one trial...}, ...]}. A correction is keyed by the whole workload
(calibration_key: GPU, strategy, method, attention kernel, Liger, sequence-length bucket, script): a LoRA trial says
nothing about a full fine-tune's speed. Records from before those fields existed count as SDPA, no Liger, train.py.
The correction is the median of measured / predicted tokens/s per GPU over that key's successful GPU trials (CPU
trials are recorded but never used: a CPU run says nothing about a GPU's speed). Predicted tokens/s and MFU are
multiplied by it and the step time divided by it; memory predictions are left alone.
Pure JSON: no torch on the planning path.
Reset with `python -m generator plan --reset-calibration` (or delete the file).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

from generator.errors import UserError
from generator.fileio import atomic_write, user_cache_dir

VERSION = 1


def default_path() -> Path:
    """$XDG_CACHE_HOME/dist-config-generator/calibration.json (default ~/.cache/...)."""
    return user_cache_dir() / "calibration.json"


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


def seq_bucket(seq_len: int) -> int:
    """The power of two at or above seq_len: attention's share of the step grows with it, so trials at 4096 do not
    correct plans at 32768."""
    return 1 << max(0, int(seq_len) - 1).bit_length()


def calibration_key(gpu_name: str, strategy: str, workload) -> tuple:
    """What a correction applies to: (GPU, strategy, method, attention, Liger, sequence-length bucket, script)."""
    w = workload
    return (gpu_name, strategy, w.method, w.attention, bool(w.liger), seq_bucket(w.seq_len), w.script)


def _record_key(m: dict) -> tuple:
    return (
        str(m.get("gpu_name")),
        str(m.get("strategy")),
        str(m.get("method", "full")),
        str(m.get("attention", "sdpa")),
        bool(m.get("liger", False)),
        seq_bucket(m.get("seq_len") or 0),
        str(m.get("script", "train.py")),
    )


def describe_key(key: tuple) -> str:
    gpu, strategy, method, attention, liger, bucket, script = key
    return f"{gpu}, {strategy}, {method}, {attention}{' + Liger' if liger else ''}, seq <= {bucket}, {script}"


def factors(measurements: list[dict]) -> dict[tuple, float]:
    """calibration_key -> median measured/predicted tokens/s ratio over successful GPU trials."""
    ratios: dict[tuple, list[float]] = {}
    for m in measurements:
        measured, predicted = m.get("measured_tokens_per_s_per_gpu"), m.get("predicted_tokens_per_s_per_gpu")
        if m.get("device") != "cuda" or m.get("status") != "ok" or not measured or not predicted:
            continue
        ratios.setdefault(_record_key(m), []).append(measured / predicted)
    return {k: statistics.median(v) for k, v in ratios.items()}


def correct(estimate, factor: float, key: tuple | None = None):
    """The estimate with its speed scaled by the measured/predicted factor (memory untouched), and a note saying so
    and which trials' correction it is."""
    which = f" for {describe_key(key)}" if key else ""
    note = f"speed corrected by x{factor:.2f} from this machine's calibration file{which} (measured/predicted)"
    return replace(
        estimate,
        tokens_per_s_per_gpu=estimate.tokens_per_s_per_gpu * factor,
        mfu=estimate.mfu * factor,
        step_s=estimate.step_s / factor,
        compute_s=estimate.compute_s / factor,
        comm_s=estimate.comm_s / factor,
        notes=(*estimate.notes, note),
    )


def calibrated_engines(engines, table: dict[tuple, float]):
    """`engines` whose estimates carry the calibration correction, so the planner ranks on corrected speeds."""
    if not table:
        return engines
    inner = engines.estimate_all

    def estimate_all(model, workload, placement, *args, **kwargs):
        out = inner(model, workload, placement, *args, **kwargs)
        keys = [calibration_key(placement.gpu_name, e.strategy, workload) for e in out]
        return [correct(e, table[k], k) if k in table else e for e, k in zip(out, keys, strict=True)]

    return replace(engines, estimate_all=estimate_all)
