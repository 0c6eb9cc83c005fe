"""Flex attention rows at chosen (row length, document length) pairs, in the probe's attention-row format.

Why: TRL's padding-free packing flattens a micro-batch of `mb` documents of `max_length` tokens into one row of
mb x max_length tokens with restarting positions, so flex runs a block mask of whole-length documents inside a longer
row. `probe --compute` times flex on 1,024-token documents and on whole rows only (its time box); the table read the
4,096-token documents of a 16,384-token row between those rows, and the plan's TRL QLoRA pick at 4,096 x 4 ran 11%
faster than predicted (bench/results/h200-x1-trl-cli-2026-12-03-c.json). This times exactly those pairs with the
probe's own code (generator/probe/compute_attention.py), so `bench/fit_compute.py --supplement FILE` can add them.

    python bench/scripts/flex_rows.py --pair 16384x4096 8192x4096 --out flex-rows.json

`--path sdpa_math` times SDPA's math kernel instead (a class handing SDPA fewer key heads than query heads without
enable_gqa, Falcon-7B's in transformers 5.17-5.24; the probe times it with `--model` of such a model), whole rows:

    python bench/scripts/flex_rows.py --path sdpa_math --layout 71x1x64 --pair 2048x2048 4096x4096 --out math.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from generator.probe import compute_grid as grid  # noqa: E402


def pair(text: str) -> tuple[int, int]:
    seq, _, doc = text.partition("x")
    if not (seq.isdigit() and doc.isdigit()) or int(doc) > int(seq):
        raise argparse.ArgumentTypeError(f"{text!r}: want ROWxDOC with DOC <= ROW, e.g. 16384x4096")
    return int(seq), int(doc)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", type=pair, nargs="+", required=True, help="ROWxDOC: row tokens x document tokens")
    ap.add_argument("--layout", default="32x8", help="query heads x kv heads [x head_dim, default 128] (Mistral's)")
    ap.add_argument("--path", choices=("flex", "sdpa_math"), default="flex")
    ap.add_argument("--tokens", type=int, default=grid.ATTN_TOKENS, help="tokens per call (micro-batch = tokens/row)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    import torch

    from generator.probe.clock import Clock
    from generator.probe.compute_attention import attention_rows

    device = "cuda" if torch.cuda.is_available() else "cpu"
    heads, kv, *width = (int(x) for x in args.layout.split("x"))
    clock = Clock.for_device(device)
    dim = (width[0] if width else 128) if device == "cuda" else 32
    rows = []
    for seq, doc in args.pair:
        doc = 0 if args.path == "sdpa_math" else doc  # whole rows: the math kernel computes every score anyway
        rows += attention_rows(clock, [args.path], [(heads, kv, dim)], [seq], args.tokens, dim, 600.0, doc=doc)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    args.out.write_text(json.dumps({"device": name, "torch": torch.__version__, "rows": rows,
                                    "skipped": clock.skipped}, indent=1) + "\n")  # fmt: skip
    for row in rows:
        print(
            f"{row['path']} {row['seq']}/{row['doc']}: fwd {row['fwd_tflops']} fwd+bwd {row['fwdbwd_tflops']} TFLOP/s"
        )
    print(*clock.skipped, sep="\n")
    return 0 if rows else 1


if __name__ == "__main__":
    raise SystemExit(main())
