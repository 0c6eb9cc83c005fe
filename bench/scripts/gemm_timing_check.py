"""How `probe --compute` timed a GEMM before 2026-12-02 against how a training step runs it (bench/REPORT.md, the LoRA
GEMM miss): one call between two CUDA events against a burst of back-to-back calls between one pair (how autograd
queues them), and a big GEMM alone or interleaved with a memory-bound copy. One H200, ~10 s.

    python bench/scripts/gemm_timing_check.py --out $OUT/gemm-timing.json

Measured 2026-12-02: bench/results/gemm-timing-h200-2026-12-02.json (the per-call launch gap: 19 us median), by this
script's first version (its own timing loops: 10 per-call and 5 burst repeats; the method is the same).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from generator.probe.clock import Clock  # noqa: E402
from generator.probe.compute_bench import gemm_operands  # noqa: E402
from generator.probe.compute_grid import Gemm  # noqa: E402

BURST = 20
LORA = ((4096, 16), (16, 4096), (4096, 64), (14336, 16), (16, 14336))
"""(k, n) of LoRA's rank-16/64 GEMMs on Mistral-7B's widths."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    clock = Clock("cuda")
    shapes = [Gemm(m, k, n, op) for m in (8192, 16384, 32768) for (k, n) in LORA for op in ("fwd", "dgrad", "wgrad")]
    shapes += [Gemm(16384, 4096, 14336, op) for op in ("fwd", "dgrad")]
    shapes += [Gemm(16384, 4096, 4096, "fwd"), Gemm(16384, 4096, 1024, "fwd")]
    rows = []
    for g in shapes:
        a, b = gemm_operands(g, "cuda", torch.bfloat16)
        fn = lambda a=a, b=b: torch.mm(a, b)  # noqa: E731
        per_call, burst = clock.time(fn) * 1e6, clock.time(fn, burst=BURST) * 1e6
        rows.append(dict(m=g.m, k=g.k, n=g.n, op=g.op, per_call_us=round(per_call, 2), burst_us=round(burst, 2)))
        print(rows[-1], flush=True)
        del a, b
    # a big GEMM alone and interleaved with a 1 GiB bf16 copy (memory-bound, lower power): does its clock rise?
    a, b = gemm_operands(Gemm(16384, 4096, 14336, "fwd"), "cuda", torch.bfloat16)
    x = torch.empty(2**29, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    alone = clock.time(lambda: torch.mm(a, b), burst=BURST) * 1e6
    copy = clock.time(lambda: y.copy_(x), burst=BURST) * 1e6
    both = clock.time(lambda: (torch.mm(a, b), y.copy_(x)), burst=BURST) * 1e6
    rows.append(dict(case="interleave", gemm_alone_us=round(alone, 1), copy_alone_us=round(copy, 1),
                     gemm_plus_copy_us=round(both, 1), gemm_inside_us=round(both - copy, 1)))  # fmt: skip
    print(rows[-1], flush=True)
    with open(args.out, "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
