"""The optimizer step's memory-bound passes on the GPU, timed as `probe --compute` times its HBM rows: torch's fused
AdamW and clip_grad_norm_ over 256M fp32 parameters split into N tensors, as a model's are.

    python bench/scripts/optimizer_rows.py --tensors 8 32 4 --out optimizer-rows.json

Why: profiled on one H200, Mixtral cut to 4 layers and fully fine-tuned spent 49 ms a step in fused AdamW and 20 ms
in clip_grad_norm_ (bench/results/profile-mixtral-l4-full-h200-2026-12-04/), where the estimator prices the update
at the copy rate and the clipping not at all. What these rows measured, and why the estimator does not yet use them,
is in bench/README.md (2026-12-04, second session). `probe --compute` records the same rows (8 tensors) in its HBM
section since 2026-12-04 (generator/probe/compute_optimizer.py); this script times other splits.
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
from generator.probe.compute_optimizer import optimizer_rows  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=3, help="repeat the rows")
    ap.add_argument("--tensors", type=int, nargs="+", default=[8], help="split the parameters into this many tensors")
    args = ap.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    clock = Clock(device)
    size = 1 << 28 if device == "cuda" else 1 << 18
    rows = [r for n in args.tensors for _ in range(args.rounds) for r in optimizer_rows(clock, size, n)]
    doc = {"kind": "compute-hbm", "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
           "script": "bench/scripts/optimizer_rows.py", "versions": {"torch": torch.__version__},
           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "hbm": rows}  # fmt: skip
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
