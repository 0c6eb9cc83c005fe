"""GEMM rows below the shipped table's smallest token count: the presets' Linears at 1,024 tokens (bf16 and float8)
and LoRA's rank-r pairs at 1,024-4,096 tokens, timed by the probe's own code, written as a supplement
(`bench/fit_compute.py --supplement`, section `gemm`).

Why: the shipped table (probe --compute --full, 2026-12-03) times the dense GEMMs from 2,048 tokens and LoRA's from
8,192. Below its smallest measured size the table's rate falls in proportion (compute_table.weighted_rate: a call never
takes less time than the smallest measured one), so a 1,024-token step's GEMMs are priced as long as a 2,048-token
step's (Mistral-7B fully fine-tuned at 1,024 x 1: 144 ms of GEMMs either way, bench/REPORT.md) and a 2,048-token
step's rank-16 adapters as long as an 8,192-token step's. Whether the floor holds is a measurement, not a choice.

    python bench/scripts/small_gemms.py --out $OUT/small-gemms.json      # ~40 s on one H200
    python bench/scripts/small_gemms.py --lora-only --gemm-timing interleaved --lora-tokens 8192,4096,2048,1024 \
        --out $OUT/small-gemms-interleaved.json    # LoRA's pairs without the launch gap
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from generator.estimate.compute_table import GEMM_BURST, GEMM_TIMINGS  # noqa: E402
from generator.probe import compute_grid as grid  # noqa: E402

DENSE_TOKENS = (1024,)
LORA_TOKENS = (2048, 4096, 1024)
"""In the order timed: a time box cuts the last."""
BOX_S = {"bf16": 40.0, "fp8": 25.0}


def gemms(device: str, lora_tokens: tuple[int, ...] = LORA_TOKENS, dense: bool = True) -> list[grid.Gemm]:
    """The presets' dense Linears at DENSE_TOKENS and LoRA's pairs at `lora_tokens` (CPU: the plumbing's tiny grid)."""
    if device != "cuda":
        return grid.cpu_grid()[:6] + grid.lora_grid(128, (16,), (64,))
    linears = grid.dense_grid(grid.preset_models(), DENSE_TOKENS) if dense else []
    return linears + grid.lora_grid(4096, grid.LORA_RANKS, lora_tokens)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--gemm-timing", choices=GEMM_TIMINGS, default=GEMM_BURST,
                    help="how each GEMM is timed (probe.clock.gemm_time): interleaved puts a device copy before "
                    "each call, so a GEMM shorter than its launch is timed without the launch gap")  # fmt: skip
    ap.add_argument("--lora-tokens", default=",".join(map(str, LORA_TOKENS)),
                    help="comma list of token counts for LoRA's rank-r pairs, in the order timed")  # fmt: skip
    ap.add_argument("--lora-only", action="store_true", help="skip the 1,024-token dense Linears")
    args = ap.parse_args(argv)
    import torch

    from bench.scripts.qlora_layer import document_header
    from generator.probe.clock import Clock
    from generator.probe.compute_bench import fp8_gemm_rows, fp8_supported, gemm_rows

    device = "cuda" if torch.cuda.is_available() else "cpu"
    clock, started = Clock.for_device(device), time.monotonic()
    clock.gemm_timing = args.gemm_timing
    shapes = gemms(device, tuple(int(t) for t in args.lora_tokens.split(",")), dense=not args.lora_only)
    doc = {**document_header("gemm-rows", "bench/scripts/small_gemms.py", device), "gemm": {}}
    doc["method"] = {"gemm_timing": args.gemm_timing if device == "cuda" else "per call"}
    doc["gemm"]["bf16"] = gemm_rows(clock, shapes, "bf16", BOX_S["bf16"])
    why = fp8_supported(device)
    doc["gemm"]["fp8"] = fp8_gemm_rows(clock, shapes, BOX_S["fp8"]) if why is None else []
    doc["skipped"] = clock.skipped + ([f"fp8: {why}"] if why else [])
    doc["seconds"] = round(time.monotonic() - started, 1)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    for dtype, rows in doc["gemm"].items():
        for r in rows:
            print(dtype, r["op"], f"{r['m']}x{r['k']}x{r['n']}", f"{r['tflops']:.1f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
