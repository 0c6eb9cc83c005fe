"""The host rows of `probe --compute --full --model M` alone: the tiny Mistral layer's (eager and compiled) and M's own
layer's (eager, compiled, and with Liger's kernels where Liger patches M), timed by the probe's own code with the full
probe's rounds and time boxes, written as a compute file's `host` section for `bench/sweep.py --host-from`.

Why: a device call is at most ten minutes. The full probe also walks every GEMM, attention, cast and MoE-layer grid
(three to six minutes with an MoE's compiled layers), none of which a call that re-prices a step's host time needs,
and the cells that call measures must run on the same machine right after the rows (a host's speed moves between
machines and within one: bench/REPORT.md cause 1). This keeps the rows identical to the probe's, so what a cell reads
from them is what `plan --compute-file` of a full probe on that machine would read.

    python bench/scripts/host_rows.py --model bench/models/qwen3-30b-a3b.json --out /tmp/host-qwen3.json   # ~3 min
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

from bench.scripts.qlora_layer import document_header  # noqa: E402
from generator.model import load_model  # noqa: E402
from generator.probe.clock import Clock  # noqa: E402
from generator.probe.compute_effort import FULL  # noqa: E402
from generator.probe.compute_host import host_rows  # noqa: E402
from generator.probe.compute_host_model import own_host_rows  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", default=[], help="a preset, config.json or model directory "
                    "(repeatable); none: the Mistral rows alone")  # fmt: skip
    ap.add_argument("--eager-only", action="store_true", help="skip the compiled rows (each compiles)")
    ap.add_argument("--models-only", action="store_true", help="skip the tiny Mistral's rows (a diagnosis of one "
                    "model's own layer; a file without them cannot stand in for the probe's host section)")  # fmt: skip
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    import torch

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    clock, compiled, started = Clock(device), cuda and not args.eager_only, time.monotonic()
    rows = [] if args.models_only else host_rows(clock, compiled=compiled, budget_s=FULL.host if cuda else 60.0,
                                                 rounds=FULL.host_rounds if cuda else None)  # fmt: skip
    doc = {**document_header("host-rows", "bench/scripts/host_rows.py", device), "host": rows,
           "skipped": clock.skipped}  # fmt: skip

    def save() -> None:  # after each part: a later model's failure keeps the rows before it
        doc["seconds"] = round(time.monotonic() - started, 1)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")

    save()
    for name in args.model:
        doc["host"] += own_host_rows(clock, load_model(name), FULL.host_model, compiled, FULL.host_rounds)
        save()
    for r in doc["host"]:
        print(r.get("model", "mistral (tiny)"), r["variant"], "compiled" if r["compiled"] else "eager",
              "liger" if r.get("liger") else "", f"{r['fwdbwd_ms_per_layer']:.3f} ms a layer", flush=True)  # fmt: skip
    print("skipped:", clock.skipped)


if __name__ == "__main__":
    main()
