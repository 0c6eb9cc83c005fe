"""Training data: load rows, recognise their format, tokenise with loss masks, pack into --seq-len blocks, and serve
them in a seeded order that does not depend on the world size (docs/train.md, "Data")."""

from __future__ import annotations

import json
from pathlib import Path

from generator.errors import UserError
from training.errors import first_line

PROMPT_TEMPLATE = "### Instruction:\n{instruction}\n\n### Response:\n"
CHAT_COLUMNS = ("messages", "conversations", "conversation")
PAIR_COLUMNS = (
    ("instruction", "response"),
    ("instruction", "output"),
    ("prompt", "completion"),
    ("prompt", "response"),
    ("question", "answer"),
)
TEXT_COLUMNS = ("text", "content")
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}


def detect_format(columns: list[str]) -> tuple[str, tuple[str, ...]]:
    """('chat', (col,)) | ('pair', (prompt_col, response_col)) | ('text', (col,)); UserError if nothing usable."""
    for col in CHAT_COLUMNS:
        if col in columns:
            return "chat", (col,)
    for pair in PAIR_COLUMNS:
        if all(c in columns for c in pair):
            return "pair", pair
    for col in TEXT_COLUMNS:
        if col in columns:
            return "text", (col,)
    raise UserError(
        f"dataset has no usable column (found {sorted(columns)}); expected 'text', 'messages', or an instruction pair "
        "such as instruction/response, instruction/output, prompt/completion, question/answer"
    )


def encode_text(tok, text: str) -> tuple[list[int], list[int]]:
    ids = tok(text)["input_ids"] + [tok.eos_token_id]
    return ids, list(ids)


def encode_pair(tok, prompt: str, response: str) -> tuple[list[int], list[int]]:
    p = tok(PROMPT_TEMPLATE.format(instruction=prompt))["input_ids"]
    r = tok(response, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    return p + r, [-100] * len(p) + r


def normalise_messages(messages: list[dict]) -> list[dict]:
    out = []
    for m in messages:
        if "role" in m:
            out.append({"role": m["role"], "content": m["content"]})
        else:  # ShareGPT {"from": "human", "value": ...}
            out.append({"role": SHAREGPT_ROLES.get(m.get("from"), m.get("from")), "content": m.get("value", "")})
    return out


def encode_chat(tok, messages: list[dict]) -> tuple[list[int], list[int]]:
    """Render prefixes with the chat template; train only on what each assistant turn adds after its prompt."""
    messages = normalise_messages(messages)
    ids, labels, done = [], [], ""

    def add(text: str, train: bool) -> None:
        piece = tok(text, add_special_tokens=False)["input_ids"] if text else []
        ids.extend(piece)
        labels.extend(piece if train else [-100] * len(piece))

    for i, m in enumerate(messages):
        full = tok.apply_chat_template(messages[: i + 1], tokenize=False)
        if m["role"] == "assistant":
            prompt = tok.apply_chat_template(messages[:i], tokenize=False, add_generation_prompt=True) if i else ""
            if prompt.startswith(done) and full.startswith(prompt):
                add(prompt[len(done) :], False)
                add(full[len(prompt) :], True)
            else:  # template is not prefix-stable here: train on the whole turn
                add(full[len(done) :] if full.startswith(done) else full, True)
        else:
            add(full[len(done) :] if full.startswith(done) else full, False)
        done = full
    return ids, labels


def load_rows(name: str):
    """A `datasets.Dataset`, or for a local .jsonl/.json file without `datasets` installed, a list of dicts."""
    path = Path(name)
    kind = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}.get(path.suffix)
    if path.is_file() and kind is None:
        raise UserError(f"dataset file {name!r} must end in .jsonl, .json or .parquet")
    try:
        import datasets
    except ImportError:
        if not (path.is_file() and kind == "json"):
            raise UserError(f"--dataset {name!r} needs the datasets package: pip install datasets") from None
        text = path.read_text(encoding="utf-8")
        try:
            return json.loads(text) if path.suffix == ".json" else [json.loads(x) for x in text.splitlines() if x]
        except json.JSONDecodeError as exc:
            raise UserError(f"cannot load dataset {name!r}: {exc}") from None
    datasets.disable_progress_bars()
    try:
        if path.is_file():
            return datasets.load_dataset(kind, data_files=str(path), split="train")
        return datasets.load_dataset(name, split="train")
    except Exception as exc:  # datasets raises many types (FileNotFoundError, DatasetNotFoundError, ...)
        raise UserError(f"cannot load dataset {name!r}: {first_line(exc)}") from None


def tokenize_rows(rows, tok, seq_len: int) -> tuple[list[list[int]], list[list[int]], str]:
    columns = rows.column_names if hasattr(rows, "column_names") else (list(rows[0]) if rows else [])
    kind, cols = detect_format(list(columns))
    all_ids, all_labels = [], []
    for n, row in enumerate(rows):
        try:
            if kind == "chat":
                ids, labels = encode_chat(tok, row[cols[0]])
            elif kind == "pair":
                prompt = row[cols[0]] + (f"\n{row['input']}" if row.get("input") else "")
                ids, labels = encode_pair(tok, prompt, row[cols[1]])
            else:
                ids, labels = encode_text(tok, row[cols[0]])
        except Exception as exc:
            raise UserError(f"dataset row {n} could not be encoded as {kind} ({', '.join(cols)}): {exc}") from None
        labels[0] = -100  # never predict an example's first token from the previous example
        all_ids.append(ids[:seq_len])
        all_labels.append(labels[:seq_len])
    return all_ids, all_labels, f"{kind}({', '.join(cols)})"


def pack_blocks(all_ids, all_labels, seq_len: int, pad_id: int, pack: bool):
    """Returns int64 tensors input_ids, labels, position_ids, attention_mask (None when packed), each [blocks, seq]."""
    import torch

    if not pack:
        n = len(all_ids)
        ids = torch.full((n, seq_len), pad_id, dtype=torch.long)
        labels = torch.full((n, seq_len), -100, dtype=torch.long)
        mask = torch.zeros((n, seq_len), dtype=torch.long)
        for i, (x, y) in enumerate(zip(all_ids, all_labels, strict=True)):
            ids[i, : len(x)], labels[i, : len(y)], mask[i, : len(x)] = torch.tensor(x), torch.tensor(y), 1
        return ids, labels, torch.arange(seq_len).expand(n, seq_len).clone(), mask
    flat_ids = [t for x in all_ids for t in x]
    flat_labels = [t for y in all_labels for t in y]
    flat_pos = [p for x in all_ids for p in range(len(x))]
    n = len(flat_ids) // seq_len
    if n == 0:
        raise UserError(f"dataset has {len(flat_ids)} tokens, fewer than one --seq-len {seq_len} block")
    cut = n * seq_len

    def blocks(v):
        return torch.tensor(v[:cut], dtype=torch.long).view(n, seq_len)

    return blocks(flat_ids), blocks(flat_labels), blocks(flat_pos), None


class BlockStream:
    """Virtual samples [start, start+length) of an endless, epoch-wise shuffled stream over the packed blocks."""

    def __init__(self, tensors, seed: int, start: int, length: int):
        self.ids, self.labels, self.pos, self.mask = tensors
        self.seed, self.start, self.length, self._perms = seed, start, length, {}

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict:
        import torch

        v = self.start + i
        epoch, at = divmod(v, len(self.ids))
        if epoch not in self._perms:
            g = torch.Generator().manual_seed(self.seed + epoch)
            self._perms[epoch] = torch.randperm(len(self.ids), generator=g)
        b = int(self._perms[epoch][at])
        item = {"input_ids": self.ids[b], "labels": self.labels[b], "position_ids": self.pos[b], "sample_id": v}
        if self.mask is not None:
            item["attention_mask"] = self.mask[b]
        return item


def mean_tokens(ids: list[list[int]]) -> int:
    """Mean tokens per tokenized example (at least 1): what flex_attention's skipped work depends on."""
    return max(1, round(sum(map(len, ids)) / max(1, len(ids))))
