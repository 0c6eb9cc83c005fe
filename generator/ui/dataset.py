"""A quick scan of a local dataset's example lengths, for --dataset: the mean document length the planner needs for
the attention kernels. Approximate by design: no tokenizer (no transformers on the planning path); UTF-8 bytes / 4
approximates a subword tokenizer's tokens on English text."""

from __future__ import annotations

import json
from pathlib import Path

from generator.errors import UserError

BYTES_PER_TOKEN = 4.0
"""UTF-8 bytes per token of a subword (BPE / SentencePiece) tokenizer on English text: the usual rule of thumb."""
MAX_EXAMPLES = 10_000
"""Examples read at most: the mean settles long before."""


def _text_bytes(value) -> int:
    """Bytes of every string inside one example (text fields, chat messages' contents, prompt/completion pairs)."""
    if isinstance(value, str):
        return len(value.encode("utf-8"))
    if isinstance(value, dict):
        return sum(_text_bytes(v) for k, v in value.items() if k != "role")
    if isinstance(value, list):
        return sum(_text_bytes(v) for v in value)
    return 0


def _examples(path: Path) -> list:
    """Up to MAX_EXAMPLES examples; a .jsonl file is read line by line, so a large one costs only what is scanned."""
    try:
        if path.suffix == ".jsonl":
            with path.open(encoding="utf-8") as fh:
                lines = [line for _, line in zip(range(MAX_EXAMPLES * 2), fh, strict=False) if line.strip()]
            return [json.loads(line) for line in lines[:MAX_EXAMPLES]]
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"--dataset {path}: cannot read it ({err}); give a local .jsonl or .json file") from None
    except json.JSONDecodeError as err:
        why = f"not valid JSON ({err}); give a .jsonl (one example a line) or .json list"
        raise UserError(f"--dataset {path}: {why}") from None
    if isinstance(data, dict):  # {"train": [...]} or {"data": [...]}
        data = next((v for v in data.values() if isinstance(v, list)), [])
    return data[:MAX_EXAMPLES] if isinstance(data, list) else []


def mean_example_tokens(path: str) -> int:
    """Approximate mean tokens per example of a local .jsonl / .json file (bytes / BYTES_PER_TOKEN)."""
    examples = _examples(Path(path))
    sizes = [_text_bytes(e) for e in examples]
    sizes = [b for b in sizes if b > 0]
    if not sizes:
        raise UserError(f"--dataset {path}: no text found in its examples; give --doc-tokens N instead")
    return max(1, round(sum(sizes) / len(sizes) / BYTES_PER_TOKEN))
