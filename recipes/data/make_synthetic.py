"""Write the small synthetic fine-tuning datasets shipped in recipes/data/ (written by us, not copied from anywhere).

Three learnable tasks, so the loss visibly falls within a few dozen steps even on a tiny random model:
  add      "add 23 and 58"            -> "81"
  reverse  "reverse: kqzt"            -> "tzqk"
  lookup   "a=3 b=7 c=1; what is b?"  -> "7"
Each task is rendered in three formats that train.py understands:
  synthetic_instruct.jsonl  {"id", "instruction", "response"}   (prompt tokens are masked out of the loss)
  synthetic_chat.jsonl      {"id", "messages": [{"role", "content"}, ...]}   (non-assistant tokens masked)
  synthetic_text.jsonl      {"id", "text"}                        (every token is trained)
Deterministic: the same --seed always writes byte-identical files.

`--long-tokens N` writes synthetic_long.jsonl instead: {"id", "text"} documents of at least N characters (N tokens
under the bench's character tokenizer, more under a subword one), each a chain of the same tasks. Packed, every
sequence up to N tokens is one document: the case where attention work is largest (bench/sweep.py's `fill` cells).
It is written where a benchmark needs it, not shipped.

    python recipes/data/make_synthetic.py [--rows 1000] [--seed 0] [--out recipes/data]
    python recipes/data/make_synthetic.py --long-tokens 33000 --rows 16 --out /tmp/bench-sweep
"""

from __future__ import annotations

import argparse
import json
import random
import string
from pathlib import Path

LETTERS = string.ascii_lowercase[:12]  # a small alphabet keeps the tasks learnable by a tiny model


def make_pair(rng: random.Random) -> tuple[str, str]:
    task = rng.choice(("add", "reverse", "lookup"))
    if task == "add":
        a, b = rng.randint(0, 49), rng.randint(0, 49)
        return f"add {a} and {b}", str(a + b)
    if task == "reverse":
        word = "".join(rng.choice(LETTERS) for _ in range(rng.randint(3, 7)))
        return f"reverse: {word}", word[::-1]
    keys = rng.sample(LETTERS, 3)
    values = [rng.randint(0, 9) for _ in keys]
    asked = rng.randrange(3)
    table = " ".join(f"{k}={v}" for k, v in zip(keys, values, strict=True))
    return f"{table}; what is {keys[asked]}?", str(values[asked])


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, sort_keys=True) + "\n")


def long_document(rng: random.Random, chars: int) -> str:
    """Task lines joined until the text is at least `chars` characters long."""
    lines, size = [], 0
    while size < chars:
        prompt, answer = make_pair(rng)
        lines.append(f"{prompt} = {answer}")
        size += len(lines[-1]) + 1
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000, help="rows per file")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(Path(__file__).parent), help="output directory")
    parser.add_argument("--long-tokens", type=int, default=0, help="write long documents instead")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    if args.long_tokens:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        docs = [{"id": i, "text": long_document(rng, args.long_tokens)} for i in range(args.rows)]
        write_jsonl(out / "synthetic_long.jsonl", docs)
        print(f"wrote {args.rows} documents of at least {args.long_tokens} characters to {out}")
        return
    pairs = [make_pair(rng) for _ in range(args.rows)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(
        out / "synthetic_instruct.jsonl", [{"id": i, "instruction": p, "response": r} for i, (p, r) in enumerate(pairs)]
    )
    chat = [
        {"id": i, "messages": [{"role": "user", "content": p}, {"role": "assistant", "content": r}]}
        for i, (p, r) in enumerate(pairs)
    ]
    write_jsonl(out / "synthetic_chat.jsonl", chat)
    write_jsonl(out / "synthetic_text.jsonl", [{"id": i, "text": f"{p} = {r}"} for i, (p, r) in enumerate(pairs)])
    print(f"wrote 3 x {args.rows} rows to {out}")


if __name__ == "__main__":
    main()
