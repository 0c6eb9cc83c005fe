"""The probe's MoE whole-layer rows alone (generator/probe/compute_layers.py), eager and compiled as train.py compiles
them, without the rest of `probe --compute --full` (whose other sections the shipped table already holds).

    python bench/scripts/moe_layers.py --model mixtral-8x7b --out moe-layers.json

`bench/fit_compute.py --supplement FILE` adds the rows to the shipped table; a row the table holds at the same
shape, variant and compile mode keeps the table's timing (the supplement adds what is new).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from generator.probe.clock import Clock  # noqa: E402
from generator.probe.compute_grid import LAYER_SIZES_FULL  # noqa: E402
from generator.probe.compute_layers import hf_config_dict, layer_rows  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", required=True, help="a preset or a local model directory (repeatable)")
    ap.add_argument("--eager-only", action="store_true", help="skip the compiled rows")
    ap.add_argument("--small-only", action="store_true", help="only the second size of LAYER_SIZES_FULL (4,096 tokens)")
    ap.add_argument("--budget-s", type=float, default=300.0, help="time box over all rows")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    configs = []
    for name in args.model:
        cfg = hf_config_dict(name)
        if cfg is None:
            raise SystemExit(f"--model {name!r}: not a preset or a local model directory with config.json")
        configs.append((name, cfg))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    clock = Clock(device)
    t0 = time.monotonic()
    sizes = LAYER_SIZES_FULL[1:] if args.small_only else LAYER_SIZES_FULL
    rows = layer_rows(clock, configs, args.budget_s, compiled=not args.eager_only, sizes=sizes)
    doc = _document(device, rows, clock.skipped, time.monotonic() - t0)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))


def _document(device: str, rows: list, skipped: list, seconds: float) -> dict:
    import transformers

    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    return {"kind": "compute-layers", "device": name, "script": "bench/scripts/moe_layers.py",
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "seconds": round(seconds, 1),
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            "layers": rows, "skipped": skipped}  # fmt: skip


if __name__ == "__main__":
    main()
