"""The optimizer step's memory-bound passes on the GPU, timed as `probe --compute` times its HBM rows: torch's fused
AdamW and clip_grad_norm_ over 256M fp32 parameters split into N tensors, as a model's are.

    python bench/scripts/optimizer_rows.py --tensors 8 32 4 --out optimizer-rows.json

Why: profiled on one H200, Mixtral cut to 4 layers and fully fine-tuned spent 49 ms a step in fused AdamW and 20 ms
in clip_grad_norm_ (bench/results/profile-mixtral-l4-full-h200-2026-12-04/), where the estimator prices the update
at the copy rate and the clipping not at all. What these rows measured, and why the estimator does not yet use them,
is in bench/README.md (2026-12-04, second session).
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

from generator.probe.compute_bench import Clock  # noqa: E402

PASS_BYTES = {"adamw_fused_fp32": 28, "clip_grad_norm_fp32": 12}
"""Bytes per fp32 parameter: fused AdamW reads parameter, gradient and both moments and writes parameter and moments
(28); clip_grad_norm_ reads each gradient for the foreach norm, then reads and writes it in the foreach multiply,
which torch runs whatever the norm (12)."""


def optimizer_rows(clock: Clock, elements: int, tensors: int) -> list[dict]:
    """GB/s of each pass (PASS_BYTES) over `elements` fp32 parameters in `tensors` tensors."""
    params = [
        torch.zeros(elements // tensors, device=clock.device, dtype=torch.float32, requires_grad=True)
        for _ in range(tensors)
    ]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, lr=1e-6, fused=True)
    opt.step()  # allocates the moments outside the timing
    n = (elements // tensors) * tensors
    tests = {
        "adamw_fused_fp32": opt.step,
        "clip_grad_norm_fp32": lambda: torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True),
    }
    rows = []
    for name, fn in tests.items():
        s = clock.time(fn)
        nbytes = PASS_BYTES[name] * n
        rows.append({"op": name, "tensors": tensors, "bytes": nbytes, "ms": round(s * 1e3, 4),
                     "gbps": round(nbytes / s / 1e9, 1)})  # fmt: skip
    return rows


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
