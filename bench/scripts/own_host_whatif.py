"""What a model's own-layer host rows, timed on another machine, would predict for bench rows that ran without them.

The own rows (`host_rows.py --models-only --model M`) and the tiny Mistral's (`host_rows.py`) come from one machine;
each bench row that holds its own machine's Mistral host rows is priced twice: as the report prices it (no own rows:
the Mistral rows scaled by the layer's op count) and with the other machine's own rows rescaled by the two machines'
Mistral rows (host_time.host_ratio). Prints both beside the measured tokens/s; fits and writes nothing.

    PYTHONPATH=. python bench/scripts/own_host_whatif.py --match qwen3-30b \
        --own bench/results/h100-x1-host-rows-qwen3-own-2026-12-06.json \
        --mistral bench/results/h100-x1-host-rows-mistral-2026-12-06.json
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from bench import calibration as cal
from bench.results_rows import load_files, load_rows
from bench.row import GPU_NAME
from generator.estimate import estimate
from generator.estimate.compute_source import table_for
from generator.estimate.host_time import host_ratio, host_tables, model_host_tables


def whatif(own: list[dict], mistral: list[dict], match: str) -> list[dict]:
    files = load_files()
    busbw = cal.measured_busbw(files)
    other, _ = host_tables(mistral)
    base = replace(table_for(GPU_NAME), host=other, host_models=model_host_tables(own))
    out = []
    for row in load_rows(files):
        if match not in row.label or not row.host:
            continue
        ratio = host_ratio(host_tables(list(row.host))[0], other)
        if ratio is None:
            continue
        # the other machine's tables as the base: placement swaps in the row's own host rows and rescales the
        # base's own-model rows by the row's machine over the base's, as it does for the shipped table's
        with_own = estimate(row.spec, row.workload, cal.placement(row.gpus, busbw, row, base), row.strategy)
        out.append({
            "row": row.label, "source": row.source, "measured": row.tps, "ratio": round(ratio, 3),
            "predicted": round(cal.predict(row, busbw).tokens_per_s_per_gpu),
            "with_own_rows": round(with_own.tokens_per_s_per_gpu),
        })  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--own", type=Path, required=True, help="host_rows.py --models-only results (the model's rows)")
    ap.add_argument("--mistral", type=Path, required=True, help="host_rows.py results from the same machine")
    ap.add_argument("--match", required=True, help="a substring of the bench rows' labels (e.g. qwen3-30b)")
    args = ap.parse_args()
    own = [r for r in json.loads(args.own.read_text())["host"] if r.get("model")]
    mistral = [r for r in json.loads(args.mistral.read_text())["host"] if not r.get("model")]
    if not own or not mistral:
        raise SystemExit("need the model's own host rows in --own and the tiny Mistral's in --mistral")
    for r in whatif(own, mistral, args.match):
        print(json.dumps(r))


if __name__ == "__main__":
    main()
