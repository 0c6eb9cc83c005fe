"""Fine-tune a causal LM (Mistral-7B by default) under any Accelerate config the generator emits.

    accelerate launch --config_file CONFIG.yaml train.py --model mistralai/Mistral-7B-v0.1 \
        --dataset recipes/data/synthetic_instruct.jsonl --method full --seq-len 4096 \
        --micro-batch 1 --global-batch 16 --max-steps 100 --output-dir out/run1

One script for DDP, FSDP/FSDP2/HSDP and DeepSpeed ZeRO-1/2/3 (+offload); nothing in here names a strategy except to
report it. The parallelism comes from the launch environment, so `Accelerator()` gets no parallelism arguments.

Numerics (the same model is trained under every strategy)
    Weights are loaded in fp32 by default (`--load-dtype fp32`) and the config's `mixed_precision: bf16` runs the
    matmuls in bf16, so every strategy keeps fp32 master weights and fp32 AdamW states: DDP through autocast over fp32
    parameters, FSDP2 through its MixedPrecisionPolicy over fp32 shards, DeepSpeed through its own fp32 master copy.
    Pure-bf16 AdamW drops updates smaller than bf16's resolution, which made DDP stall where FSDP/ZeRO trained
    (issue 5). `--load-dtype bf16` gives pure-bf16 training under DDP (FSDP and DeepSpeed still keep fp32 masters).
    DDP uses gradient_as_bucket_view=True (DDP_GRADIENT_AS_BUCKET_VIEW): gradients live inside the all-reduce buckets,
    saving one gradient-sized copy; the memory estimator assumes it (the buckets, and so the gradients, then stay
    allocated through the forward pass: 134.4 GB measured on 2x H200 against 117.0 on one GPU).
    `--init random` rounds the fp32 weights to the bf16 grid, as a bf16 checkpoint and DeepSpeed's masters are, so
    every strategy starts from the same masters.
    Measured parity on 2x H200 (bench/results/h200-x2-2026-11-30.json, tests/test_gpu_parity_results.py): DDP and
    FSDP2 (full shard and no reshard, checkpointing on and off) within 0.024 in loss at every one of 20 steps;
    DeepSpeed ZeRO-1/2/3, run before the bf16-grid rounding, trailed early on (see snap_to_bf16_grid).
    The loss is the token mean over the whole global batch (every micro-batch on every rank divides its summed loss by
    the global count of label tokens), so 1 process with accumulation and N processes give the same gradients.

Data
    `--dataset` is a hub name, a local .jsonl/.json/.parquet file or a directory, read with `datasets`. Formats, picked
    from the columns: chat `messages` (or ShareGPT `conversations`) rendered with the tokenizer's chat template, only
    assistant tokens trained; instruction pairs (`instruction`[+`input`]/`response`|`output`, `prompt`/`completion`,
    `question`/`answer`) rendered as "### Instruction:/### Response:", prompt tokens masked with -100; plain `text`.
    Packing (default, `--pack`): examples are concatenated and cut into --seq-len blocks; position_ids restart at 0 for
    every example and no attention mask is passed, which transformers (>= 4.56, here 5.x) turns into a block-diagonal
    causal mask for SDPA/eager/flex and varlen for flash-attention: no attention across example boundaries, and the
    first token of each example is never a target of the previous one. An example straddling a block boundary is
    split (its tail starts the next block and sees only itself). Examples longer than --seq-len are truncated; the
    last partial block is dropped. `--no-pack` pads each example to --seq-len instead (attention mask, no packing).
    Order: the packed blocks are shuffled by a permutation seeded with (--seed + epoch); step s consumes virtual samples
    [s*G, (s+1)*G) of that endless stream (G = global batch), split over ranks by Accelerate. The order therefore does
    not depend on the world size and a resumed run starts exactly where the checkpoint stopped.

Checkpoints and preemption (issue 9)
    Every --save-every steps, on the last step, and on SIGTERM/SIGUSR1: `accelerator.save_state` writes into
    OUTPUT/.tmp-step-NNNNNNNN, rank 0 adds trainer_state.json, fsyncs every file, renames the directory to
    step-NNNNNNNN, fsyncs OUTPUT and then atomically replaces the OUTPUT/latest pointer. --keep-last prunes older
    step-* directories only after that. A directory named step-* is therefore always complete; .tmp-* leftovers from a
    crash are deleted at the next start and never resumed from. `--resume` (or `--resume PATH`) restores weights,
    optimizer, scheduler, RNG state and the data position; with no checkpoint yet it starts fresh, which is what a
    torchrun `--max_restarts` restart of the same command needs. Checkpoints assume OUTPUT is on a filesystem every
    node sees.
    On SIGTERM or SIGUSR1 (SLURM's preemption warning) every rank finishes its current optimizer step, the ranks agree
    (one all-reduce per step), a checkpoint is written and the process exits with EXIT_PREEMPTED = 75 (EX_TEMPFAIL in
    sysexits.h: "temporary failure, retry later", distinct from 143 = killed by SIGTERM without a checkpoint, so a
    requeue script can test for it). `accelerate launch` does not pass a child's exit code through (it reports 1), so
    the log's "preempted" record and the stderr line say it too. torchrun gives workers 30 s after forwarding SIGTERM.
    Elastic restarts (torchrun --max_restarts N) rerun the same command, so keep --resume in it, and export
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: torchrun's shared rendezvous store keeps the previous round's peer addresses
    and a restarted worker can race to a dead peer ("Connection refused"; seen with gloo in the tests).
    Before training: the output directory must be writable and have room for one more checkpoint plus the export.

Exit codes: 0 done, 2 user error (one line on stderr, no traceback), 75 preempted after a clean checkpoint.
(`accelerate launch` adds its own CalledProcessError traceback for any non-zero child exit of its single-process and
DeepSpeed launchers unless given --quiet; torchrun prints a ChildFailedError table.)

Metrics: a progress bar on rank 0; one JSON line per step in --log-file (loss, lr, grad_norm, tokens/s per GPU, MFU from
the estimator's 6N + 12*L*h*s FLOPs per token over the GPU's dense bf16 peak, max memory allocated/reserved of every
rank); a summary at the end with the estimator's predicted peak beside the measured one.

Test-only hooks (environment variables, used by tests/test_train_*.py, never needed in real runs):
    TRAIN_TEST_STEP_DELAY=S       sleep S seconds after every step (makes signal timing deterministic in tests)
    TRAIN_TEST_SLOW_SAVE=STEP:S   sleep S seconds inside the temporary checkpoint directory of STEP (kill-during-save)
    TRAIN_TEST_FREE_BYTES=N       pretend the output filesystem has N bytes free
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from generator.errors import UserError

DDP_GRADIENT_AS_BUCKET_VIEW = True  # the memory estimator counts DDP gradients as living in the buckets
EXIT_USER_ERROR = 2
EXIT_PREEMPTED = 75  # EX_TEMPFAIL: checkpoint written, rerun with --resume
DEFAULT_MODEL = "mistralai/Mistral-7B-v0.1"
DEFAULT_LORA_TARGETS = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
CKPT_PREFIX, TMP_PREFIX, LATEST, STATE_FILE = "step-", ".tmp-step-", "latest", "trainer_state.json"
PROMPT_TEMPLATE = "### Instruction:\n{instruction}\n\n### Response:\n"


# ----------------------------------------------------------------------------------------------------------------------
# 1. Command line
# ----------------------------------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Fine-tune a causal LM under any Accelerate config (see module docstring).")
    a = p.add_argument
    a("--model", default=DEFAULT_MODEL, help="hub id or local directory (config.json + weights + tokenizer)")
    a("--init", choices=("pretrained", "random"), default="pretrained", help="random: the architecture, random weights")
    a("--dataset", default="recipes/data/synthetic_instruct.jsonl", help="hub name or local .jsonl/.json/.parquet")
    a("--method", choices=("full", "lora", "qlora"), default="full")
    a("--seq-len", type=int, default=4096)
    a("--micro-batch", type=int, default=1, help="sequences per GPU per forward/backward")
    a("--global-batch", type=int, default=16, help="sequences per optimizer step over all GPUs")
    a(
        "--grad-checkpointing",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="HF activation checkpointing (skipped when the FSDP config applies its own)",
    )
    a("--lr", type=float, default=1e-5)
    a("--warmup-steps", type=int, default=10)
    a("--max-steps", type=int, default=100)
    a("--max-grad-norm", type=float, default=1.0, help="0 disables clipping (DeepSpeed 'auto' gets this value)")
    a("--seed", type=int, default=42)
    a("--save-every", type=int, default=0, help="checkpoint every N steps (0: only on preemption)")
    a("--keep-last", type=int, default=2, help="complete checkpoints to keep (0: keep all)")
    a("--output-dir", default="out/train")
    a(
        "--resume",
        nargs="?",
        const="auto",
        default=None,
        metavar="PATH",
        help="continue from the latest complete checkpoint in --output-dir (or PATH); start fresh if there is none",
    )
    a("--export", default=None, metavar="DIR", help="final HF model / LoRA adapter directory (default OUTPUT/final)")
    a("--no-export", action="store_true", help="skip the final export")
    a("--liger", action="store_true", help="apply Liger kernels (pip install liger-kernel)")
    a(
        "--attn-implementation",
        choices=("sdpa", "flex_attention", "eager"),
        default="sdpa",
        help="attention kernel; flex_attention (GPU only) skips the blocks packing masks out instead of passing SDPA a "
        "dense mask, which rules out its flash kernel",
    )
    a("--load-dtype", choices=("fp32", "bf16"), default="fp32", help="fp32: fp32 master weights under every strategy")
    a("--lora-r", type=int, default=16)
    a("--lora-alpha", type=int, default=32)
    a("--lora-targets", default=DEFAULT_LORA_TARGETS, help="comma list of module names, or all-linear")
    a("--pack", action=argparse.BooleanOptionalAction, default=True, help="pack examples (default) or pad each")
    a("--log-file", default=None, help="per-step JSONL (default OUTPUT/train_log.jsonl)")
    a("--log-sample-ids", action="store_true", help="record the sample ids of every step in the log")
    args = p.parse_args(argv)
    for name in ("seq_len", "micro_batch", "global_batch", "max_steps", "lora_r"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    for name in ("warmup_steps", "save_every", "keep_last"):
        if getattr(args, name) < 0:
            raise UserError(f"--{name.replace('_', '-')} must be 0 or more, got {getattr(args, name)}")
    args.log_file = args.log_file or os.path.join(args.output_dir, "train_log.jsonl")
    args.export = None if args.no_export else (args.export or os.path.join(args.output_dir, "final"))
    return args


def grad_accum_steps(global_batch: int, micro_batch: int, world_size: int) -> int:
    """Micro-steps per optimizer step; the generator prints the same number in its launch command."""
    per_step = micro_batch * world_size
    if global_batch % per_step:
        raise UserError(
            f"--global-batch {global_batch} is not divisible by --micro-batch {micro_batch} x {world_size} processes "
            f"= {per_step}; use a multiple of {per_step} or change the config's num_processes"
        )
    return global_batch // per_step


# ----------------------------------------------------------------------------------------------------------------------
# 2. Output directory and atomic checkpoints (plain files; no torch)
# ----------------------------------------------------------------------------------------------------------------------
def check_output_dir(path: str) -> Path:
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-test-{os.getpid()}"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as exc:
        raise UserError(f"output directory {str(out)!r} is not writable: {exc.strerror or exc}") from None
    return out


def check_free_space(path: Path, need_bytes: int, what: str) -> None:
    free = int(os.environ.get("TRAIN_TEST_FREE_BYTES", 0)) or shutil.disk_usage(path).free
    if free < need_bytes:
        raise UserError(
            f"not enough disk space in {str(path)!r}: {what} needs about {need_bytes / 1e9:.2f} GB, "
            f"{free / 1e9:.2f} GB free; free space, lower --keep-last or choose another --output-dir"
        )


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            _fsync_path(Path(dirpath) / name)
        _fsync_path(Path(dirpath))


def complete_checkpoints(out: Path) -> list[Path]:
    """step-* directories holding trainer_state.json, oldest first. Temporary directories are never listed."""
    found = [d for d in out.glob(f"{CKPT_PREFIX}*") if d.is_dir() and (d / STATE_FILE).is_file()]
    return sorted(found, key=lambda d: d.name)


def latest_checkpoint(out: Path) -> Path | None:
    pointer = out / LATEST
    if pointer.is_file():
        named = out / pointer.read_text().strip()
        if named.name.startswith(CKPT_PREFIX) and (named / STATE_FILE).is_file():
            return named
    done = complete_checkpoints(out)  # pointer missing or stale: the newest complete one is still safe
    return done[-1] if done else None


def atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_path(path.parent)


def publish_checkpoint(tmp: Path, final: Path, state: dict, keep_last: int) -> list[Path]:
    """Rank 0, after every rank wrote into `tmp`: seal, rename, point `latest` at it, prune. Returns pruned dirs."""
    atomic_write_text(tmp / STATE_FILE, json.dumps(state, indent=1))
    fsync_tree(tmp)
    if final.exists():  # same step saved again (e.g. preempted right after a periodic save): keep the newer one
        old = final.with_name(f".old-{final.name}")
        shutil.rmtree(old, ignore_errors=True)
        os.rename(final, old)
        os.rename(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, final)
    _fsync_path(final.parent)
    atomic_write_text(final.parent / LATEST, final.name + "\n")
    pruned = []
    if keep_last:
        for old in complete_checkpoints(final.parent)[:-keep_last]:
            if old != final:
                shutil.rmtree(old, ignore_errors=True)
                pruned.append(old)
    return pruned


def remove_stale_temporaries(out: Path) -> list[Path]:
    stale = [d for d in out.iterdir() if d.name.startswith((TMP_PREFIX, f".old-{CKPT_PREFIX}"))]
    for d in stale:
        shutil.rmtree(d, ignore_errors=True)
    return stale


# ----------------------------------------------------------------------------------------------------------------------
# 3. Data: load, recognise the format, tokenise with loss masks, pack, and order deterministically
# ----------------------------------------------------------------------------------------------------------------------
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
        raise UserError(f"cannot load dataset {name!r}: {_first_line(exc)}") from None


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


# ----------------------------------------------------------------------------------------------------------------------
# 4. Model: load after the Accelerator exists, then LoRA/QLoRA, checkpointing, Liger
# ----------------------------------------------------------------------------------------------------------------------
def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def load_config_and_tokenizer(args):
    from transformers import AutoConfig, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(args.model)
    except Exception as exc:
        raise UserError(f"cannot load model {args.model!r}: {_first_line(exc)}") from None
    max_len = getattr(config, "max_position_embeddings", None)
    if max_len and args.seq_len > max_len:
        raise UserError(f"--seq-len {args.seq_len} is above {args.model!r}'s max_position_embeddings {max_len}")
    try:
        tok = AutoTokenizer.from_pretrained(args.model)
    except Exception as exc:
        raise UserError(f"cannot load the tokenizer of {args.model!r}: {_first_line(exc)}") from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return config, tok


def load_model(args, config, use_cuda: bool, init_device: str = "cpu"):
    import torch
    from transformers import AutoModelForCausalLM

    dtype = torch.float32 if args.load_dtype == "fp32" else torch.bfloat16
    if args.attn_implementation == "flex_attention" and not use_cuda:
        raise UserError("--attn-implementation flex_attention has no CPU backward in torch; use sdpa on CPU")
    kwargs = {"dtype": dtype, "attn_implementation": args.attn_implementation}
    if args.method == "qlora":
        if not use_cuda:
            raise UserError("--method qlora needs a CUDA GPU (bitsandbytes 4-bit); use --method lora on CPU")
        try:
            from transformers import BitsAndBytesConfig
        except ImportError as exc:
            raise UserError(f"--method qlora needs bitsandbytes: pip install bitsandbytes ({exc})") from None
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16,
            bnb_4bit_quant_storage=torch.bfloat16,  # shardable by FSDP/ZeRO-3
        )
        if init_device != "cpu":  # DDP: each rank quantises onto its own GPU
            kwargs["device_map"] = {"": init_device}
    try:
        if args.init == "random":
            if args.method == "qlora":
                raise UserError("--init random cannot be combined with --method qlora (nothing to quantise)")
            with torch.device(init_device):  # random init straight on the GPU: minutes faster than CPU for 7B
                model = AutoModelForCausalLM.from_config(config, **kwargs)
            snap_to_bf16_grid(model)
        else:
            model = AutoModelForCausalLM.from_pretrained(args.model, config=config, **kwargs)
    except UserError:
        raise
    except (OSError, ValueError, ImportError, KeyError) as exc:
        raise UserError(f"cannot load model {args.model!r}: {_first_line(exc)}") from None
    model.config.use_cache = False
    return model


def build_on_gpu(args, config, strategy: str, fsdp_plugin) -> bool:
    """Where the model is built. CPU offload keeps it on the host. Pretrained weights under ZeRO-3 are partitioned as
    they load (zero.Init) and FSDP's efficient loading reads them on rank 0 only: CPU. A random init has nothing to
    read, and building 7B in fp32 on the host costs every rank ~30 GB of RAM and tens of seconds, so it goes to the
    GPU when the whole model takes at most a third of the free memory (the sharding frees it); under ZeRO-3 that also
    means building it outside zero.Init (see `outside_zero_init`)."""
    if "offload" in strategy:
        return False
    if not strategy.startswith("zero3") and not (fsdp_plugin and fsdp_plugin.cpu_ram_efficient_loading):
        return True
    if args.init != "random":
        return False
    import torch

    try:
        from generator.model import spec_from_config

        n = spec_from_config(config.to_dict(), args.model).params_total
    except Exception:
        return False
    return n * (4 if args.load_dtype == "fp32" else 2) <= torch.cuda.mem_get_info()[0] / 3


@contextlib.contextmanager
def outside_zero_init(accelerator):
    """Build the model whole, outside deepspeed.zero.Init; DeepSpeed partitions it when `prepare` starts the engine.

    Why: zero.Init draws a random init its own way (per partition, gathered onto rank 0), so a ZeRO-3 run started from
    other weights than DDP, FSDP and ZeRO-1/2 and its loss curve could not be compared with theirs (on 2x H200, loss
    11.02 vs 11.17 at step 1). Only for `--init random`: pretrained weights are the same either way.
    Accelerate 1.15's `zero3_init_context_manager(enable=False)` does not do this: it re-registers the same
    HfDeepSpeedConfig, whose stage 3 is all transformers checks. Unsetting that reference does."""
    from transformers.integrations import unset_hf_deepspeed_config

    unset_hf_deepspeed_config()
    try:
        yield
    finally:
        accelerator.state.deepspeed_plugin.set_deepspeed_weakref()  # ZeRO-3 saving and prepare read it again


def snap_to_bf16_grid(model) -> None:
    """Round fp32 random weights to bf16-representable values, as a checkpoint stored in bf16 (Mistral's, Llama's) is.

    Why: DeepSpeed casts the module to bf16 and builds its fp32 masters from that, so its masters start on the bf16
    grid, while DDP and FSDP kept the raw fp32 init. With updates far below one bf16 step (lr 1e-5 on weights of
    ~0.02, a step of ~1e-4), raw fp32 masters cross a rounding boundary at once in a fraction of weights and grid
    masters only after several steps. On 2x H200 without this rounding, ZeRO-1/2 trailed DDP/FSDP2 (loss 10.77 vs
    7.92 at step 3) with identical gradient norms; with it, DDP and FSDP2 follow the unchanged ZeRO-1/2 curve within
    0.07 at every step (bench/results/h200-x2-2026-11-30-bf16init.json). Parameters zero.Init already partitioned
    are left alone: DeepSpeed rounds them itself."""
    import torch

    with torch.no_grad():
        for p in model.parameters():
            if p.dtype == torch.float32 and not hasattr(p, "ds_id"):
                p.copy_(p.to(torch.bfloat16))


def add_adapters(model, args, grad_checkpointing: bool):
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    if args.method == "qlora":
        model = prepare_model_for_kbit_training(
            model,
            use_gradient_checkpointing=grad_checkpointing,
            gradient_checkpointing_kwargs={"use_reentrant": False},
        )
    targets = "all-linear" if args.lora_targets == "all-linear" else args.lora_targets.split(",")
    cfg = LoraConfig(
        r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=0.0, target_modules=targets, task_type="CAUSAL_LM"
    )
    try:
        return get_peft_model(model, cfg)
    except ValueError as exc:
        raise UserError(f"--lora-targets {args.lora_targets!r}: {_first_line(exc)}") from None


def strategy_name(accelerator) -> str:
    """The estimator's name for what the launch config asked for."""
    from accelerate.utils import DistributedType

    dt = accelerator.distributed_type
    if dt == DistributedType.DEEPSPEED:
        ds = accelerator.state.deepspeed_plugin
        offload = str(ds.offload_optimizer_device).lower() not in ("none", "")
        offload |= str(ds.offload_param_device).lower() not in ("none", "")
        stage = int(ds.zero_stage)
        return {0: "ddp", 1: "zero1"}.get(stage, f"zero{stage}" + ("_offload" if offload else ""))
    if dt == DistributedType.FSDP:
        pc = getattr(accelerator, "parallelism_config", None)
        if pc is not None and getattr(pc, "dp_replicate_size", 1) > 1:
            return "hsdp"
        reshard = accelerator.state.fsdp_plugin.reshard_after_forward
        if not isinstance(reshard, bool):  # FSDP1 ShardingStrategy
            name = getattr(reshard, "name", str(reshard))
            return {"SHARD_GRAD_OP": "fsdp_grad_op", "HYBRID_SHARD": "hsdp", "HYBRID_SHARD_ZERO2": "hsdp"}.get(
                name, "fsdp"
            )
        return "fsdp" if reshard else "fsdp_grad_op"
    return "ddp"


# ----------------------------------------------------------------------------------------------------------------------
# 5. Metrics: FLOPs per token (the estimator's formula), memory, the estimator's prediction
# ----------------------------------------------------------------------------------------------------------------------
def mean_tokens(ids: list[list[int]]) -> int:
    """Mean tokens per tokenized example (at least 1): what flex_attention's skipped work depends on."""
    return max(1, round(sum(map(len, ids)) / max(1, len(ids))))


def estimator_inputs(args, config, ga: int, grad_ckpt: bool, mixed_precision: str, doc_tokens: int | None = None):
    """(ModelSpec, Workload) for the generator's estimator, built from the config already loaded (no second fetch);
    (None, reason) when the estimator cannot size this model, so training never depends on it. doc_tokens: the
    dataset's mean tokens per example, which sets how much attention work flex_attention skips."""
    try:
        from generator.estimate.types import Workload
        from generator.model import spec_from_config

        spec = spec_from_config(config.to_dict(), args.model)
        workload = Workload(
            method=args.method,
            seq_len=args.seq_len,
            micro_batch=args.micro_batch,
            grad_accum=ga,
            grad_checkpointing=grad_ckpt,
            load_dtype=args.load_dtype,
            mixed_precision="bf16" if mixed_precision == "bf16" else "no",
            lora_r=args.lora_r,
            liger=args.liger,
            grad_as_bucket_view=DDP_GRADIENT_AS_BUCKET_VIEW,
            attention="flex" if args.attn_implementation == "flex_attention" else "sdpa",
            doc_tokens=doc_tokens,
        )
        return spec, workload
    except Exception as exc:
        return None, f"estimator cannot size the model ({_first_line(exc)})"


def flops_per_token(args, config, spec) -> tuple[float, str]:
    """6N + 12*L*h*s: the estimator's function when it sized the model, else the same formula from the config."""
    if spec is not None:
        from generator.model import flops_per_token as est_flops

        return float(est_flops(spec, args.seq_len)), "estimator"
    h, layers = config.hidden_size, config.num_hidden_layers
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    hd = getattr(config, "head_dim", None) or h // heads
    per_layer = h * heads * hd * 2 + h * kv * hd * 2 + 3 * h * config.intermediate_size
    n = layers * per_layer + h * config.vocab_size
    return float(6 * n + 12 * layers * h * args.seq_len), "train.py (6N + 12*L*h*s)"


def checkpoint_bytes(spec, workload, strategy: str, n_params: int, n_trainable: int, load_dtype: str) -> int:
    """What one save_state writes: the estimator's checkpoint_size_gb, else weights + fp32 AdamW m, v (+ masters)."""
    if spec is not None:
        try:
            from generator.estimate import checkpoint_size_gb

            return int(checkpoint_size_gb(spec, workload, strategy) * 1e9)
        except Exception:
            pass
    return n_params * (2 if load_dtype == "bf16" else 4) + n_trainable * 12


def gpu_peak_tflops() -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    try:
        from generator.estimate import gpu_peak_tflops as peak

        return float(peak(torch.cuda.get_device_name()))
    except Exception:
        return None


def predicted_peak_gb(accelerator, spec, workload, strategy: str) -> tuple[float | None, str]:
    import torch

    if not torch.cuda.is_available():
        return None, "no GPU"
    if spec is None:
        return None, workload  # the reason estimator_inputs gave
    try:
        from generator.estimate import estimate
        from generator.estimate.types import Placement

        local = int(os.environ.get("LOCAL_WORLD_SIZE", accelerator.num_processes))
        props = torch.cuda.get_device_properties(0)
        machines = max(1, accelerator.num_processes // local)
        placement = Placement(
            num_gpus_per_machine=local,
            gpu_name=props.name,
            gpu_memory_gb=props.total_memory / 1e9,
            busbw_gbps=100.0,  # only the memory prediction is used here; bandwidth does not change it
            num_machines=machines,
            inter_node_gbps=25.0 if machines > 1 else None,
        )
        return float(estimate(spec, workload, placement, strategy).peak_gb), "estimator"
    except Exception as exc:
        return None, f"estimator failed ({_first_line(exc)})"


class JsonLog:
    """Rank 0 appends one JSON object per line; a resumed run appends too, so for a repeated step the last line wins."""

    def __init__(self, path: str, enabled: bool):
        self.fh = None
        if enabled:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.fh = open(path, "a", buffering=1)  # noqa: SIM115 - held for the whole run, closed at exit

    def write(self, **record) -> None:
        if self.fh:
            self.fh.write(json.dumps(record) + "\n")
            self.fh.flush()


# ----------------------------------------------------------------------------------------------------------------------
# 6. Preemption
# ----------------------------------------------------------------------------------------------------------------------
_STOP_SIGNAL = 0


def _on_stop_signal(signum, frame) -> None:
    global _STOP_SIGNAL
    _STOP_SIGNAL = signum


def install_signal_handlers() -> None:
    for sig in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, _on_stop_signal)


# ----------------------------------------------------------------------------------------------------------------------
# 7. Training
# ----------------------------------------------------------------------------------------------------------------------
def train(args: argparse.Namespace) -> int:
    out = check_output_dir(args.output_dir)  # before any heavy import: a typo fails in a second
    env_world = int(os.environ.get("WORLD_SIZE", "1"))
    grad_accum_steps(args.global_batch, args.micro_batch, env_world)
    install_signal_handlers()

    import torch
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs, DistributedType, GradientAccumulationPlugin, set_seed

    use_cuda = torch.cuda.is_available()
    accelerator = Accelerator(
        cpu=not use_cuda,  # without it, torchrun-spawned CPU workers each train alone instead of joining a gloo group
        gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=1, sync_with_dataloader=False),
        step_scheduler_with_optimizer=False,  # stepped once per optimizer step below, independent of world size
        kwargs_handlers=[DistributedDataParallelKwargs(gradient_as_bucket_view=DDP_GRADIENT_AS_BUCKET_VIEW)],
    )
    main = accelerator.is_main_process
    world = accelerator.num_processes
    ga = grad_accum_steps(args.global_batch, args.micro_batch, world)
    accelerator.gradient_accumulation_steps = ga
    is_ds = accelerator.distributed_type == DistributedType.DEEPSPEED
    is_fsdp = accelerator.distributed_type == DistributedType.FSDP
    if os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true" and not is_fsdp and main:
        print("train.py: note: the config asks for FSDP but there is no GPU; running DDP over gloo", flush=True)
    if is_ds:
        configure_deepspeed(accelerator, args, ga)
    strategy = strategy_name(accelerator)

    # Checkpoint bookkeeping before the model load, so a wrong --resume fails fast.
    if main:
        for stale in remove_stale_temporaries(out):
            print(f"train.py: removed incomplete checkpoint {stale}", flush=True)
    accelerator.wait_for_everyone()
    resume_from = find_resume(args, out)
    start_step = 0
    if resume_from is not None:
        state = json.loads((resume_from / STATE_FILE).read_text())
        check_resume_compatible(state, args, resume_from)
        start_step = int(state["step"])

    config, tok = load_config_and_tokenizer(args)
    with accelerator.main_process_first():  # data before the model: a bad dataset fails in seconds, not after 7B
        rows = load_rows(args.dataset)
        ids, labels, data_format = tokenize_rows(rows, tok, args.seq_len)
    blocks = pack_blocks(ids, labels, args.seq_len, tok.pad_token_id, args.pack)
    set_seed(args.seed)  # identical random init on every rank
    fsdp_ac = is_fsdp and bool(accelerator.state.fsdp_plugin.activation_checkpointing)
    on_gpu = use_cuda and build_on_gpu(args, config, strategy, is_fsdp and accelerator.state.fsdp_plugin)
    whole = is_ds and strategy.startswith("zero3") and on_gpu  # a random init, built as every other strategy builds it
    with outside_zero_init(accelerator) if whole else contextlib.nullcontext():
        model = load_model(args, config, use_cuda, str(accelerator.device) if on_gpu else "cpu")
    if args.liger:
        try:
            from liger_kernel.transformers import _apply_liger_kernel_to_instance
        except ImportError:
            raise UserError("--liger needs liger-kernel: pip install liger-kernel") from None
        _apply_liger_kernel_to_instance(model=model)
    hf_ckpt = args.grad_checkpointing and not fsdp_ac and args.method != "qlora"
    if hf_ckpt:
        enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5.x name
        if enable is not None:
            enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if args.method in ("lora", "qlora"):
        model = add_adapters(model, args, args.grad_checkpointing and not fsdp_ac)

    n_params = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())
    n_trainable = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters() if p.requires_grad)
    qlora_ckpt = args.method == "qlora" and args.grad_checkpointing  # peft's prepare_model_for_kbit_training did it
    spec, workload = estimator_inputs(
        args, config, ga, hf_ckpt or fsdp_ac or qlora_ckpt, accelerator.mixed_precision, mean_tokens(ids)
    )
    if main and (args.save_every or args.export):
        ckpt = checkpoint_bytes(spec, workload, strategy, n_params, n_trainable, args.load_dtype)
        bytes_per = 2 if args.load_dtype == "bf16" else 4
        export_bytes = (n_trainable if args.method != "full" else n_params) * bytes_per if args.export else 0
        check_free_space(out, int(1.05 * (ckpt + export_bytes)), "one checkpoint plus the export")

    total = args.max_steps * args.global_batch
    stream = BlockStream(blocks, args.seed, start_step * args.global_batch, total - start_step * args.global_batch)
    loader = torch.utils.data.DataLoader(stream, batch_size=args.micro_batch, shuffle=False, num_workers=0)

    fused = use_cuda and not (is_ds and "offload" in strategy)
    # No named list of the parameters may outlive prepare(): FSDP2's fully_shard moves the original Parameter objects
    # to the GPU whole and then swaps in sharded ones, so a lingering reference pins a full fp32 copy of the model on
    # every GPU (on 2x H200 the FSDP2 runs peaked 29.0 GB = 4 bytes x 7.24B params above the estimate).
    optimizer = torch.optim.AdamW(
        (p for p in model.parameters() if p.requires_grad), lr=args.lr, weight_decay=0.0, fused=fused
    )
    from transformers import get_cosine_schedule_with_warmup

    scheduler = get_cosine_schedule_with_warmup(optimizer, args.warmup_steps, args.max_steps)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    if whole:  # DeepSpeed now holds only its partitions: hand the whole model's cached blocks back to the driver
        torch.cuda.empty_cache()
    if resume_from is not None:
        accelerator.load_state(str(resume_from))

    log = JsonLog(args.log_file, main)
    flops, flops_src = flops_per_token(args, config, spec)
    peak_tflops = gpu_peak_tflops()
    predicted, predicted_src = predicted_peak_gb(accelerator, spec, workload, strategy)
    log.write(
        event="start",
        step=start_step,
        strategy=strategy,
        distributed_type=str(accelerator.distributed_type),
        world_size=world,
        grad_accum=ga,
        mixed_precision=accelerator.mixed_precision,
        load_dtype=args.load_dtype,
        method=args.method,
        params=n_params,
        trainable_params=n_trainable,
        data_format=data_format,
        blocks=len(blocks[0]),
        packed=args.pack,
        grad_checkpointing="fsdp" if fsdp_ac else (hf_ckpt or qlora_ckpt),
        resumed_from=str(resume_from) if resume_from else None,
        flops_per_token=flops,
        flops_source=flops_src,
    )
    if main:
        print(
            f"train.py: {strategy} on {world} process(es), grad accumulation {ga}, {args.method}, "
            f"{n_trainable:,}/{n_params:,} trainable params, data {data_format}, {len(blocks[0])} blocks"
            + (f", resuming at step {start_step} from {resume_from}" if resume_from else ""),
            flush=True,
        )

    step, exit_code = start_step, 0
    stats = {"tokens": 0, "seconds": 0.0, "losses": []}
    device = accelerator.device
    tokens_per_step_per_gpu = args.micro_batch * ga * args.seq_len
    data = iter(loader)
    bar = make_progress(main, start_step, args.max_steps)
    model.train()
    while step < args.max_steps:
        t0 = time.perf_counter()
        micro = [next(data) for _ in range(ga)]
        n_tok = sum((mb["labels"][:, 1:] != -100).sum() for mb in micro).to(device)
        n_tok = accelerator.reduce(n_tok, "sum").clamp(min=1)
        loss_sum = torch.zeros((), device=device)
        for mb in micro:
            with accelerator.accumulate(model):
                inputs = {k: v for k, v in mb.items() if k != "sample_id"}
                out_ = model(**inputs, use_cache=False, num_items_in_batch=n_tok)
                # Accelerate divides by ga and the gradient reduction averages over ranks: undo both, so the
                # gradient is d(sum of token losses)/d(theta) / (label tokens in the whole global batch).
                accelerator.backward(out_.loss * (world * ga))
                loss_sum += out_.loss.detach().float()
        grad_norm = None
        if args.max_grad_norm > 0 or is_ds:
            grad_norm = accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm or float("inf"))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        loss = accelerator.reduce(loss_sum, "sum").item()
        elapsed = time.perf_counter() - t0
        record = step_record(step, loss, scheduler, grad_norm, elapsed, tokens_per_step_per_gpu, flops, peak_tflops)
        record.update(memory_record(accelerator, use_cuda))
        if args.log_sample_ids:
            ids_here = torch.cat([mb["sample_id"] for mb in micro]).to(device)
            record["samples"] = sorted(accelerator.gather(ids_here).tolist())
        log.write(**record)
        if stats["losses"]:  # the first step of a run (allocator warm-up, lazy init) is left out of the throughput
            stats["tokens"] += tokens_per_step_per_gpu
            stats["seconds"] += elapsed
        stats["losses"].append(loss)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(
                loss=f"{loss:.4f}", lr=f"{record['lr']:.2e}", tok_s_gpu=f"{record['tokens_per_s_per_gpu']:.0f}"
            )
        if os.environ.get("TRAIN_TEST_STEP_DELAY"):
            time.sleep(float(os.environ["TRAIN_TEST_STEP_DELAY"]))
        stop = accelerator.reduce(torch.tensor(float(_STOP_SIGNAL), device=device), "max").item()
        due = args.save_every and (step % args.save_every == 0 or step == args.max_steps)
        if stop or due:
            save_checkpoint(accelerator, out, step, args, world, ga, log)
        if stop:
            exit_code = EXIT_PREEMPTED
            log.write(event="preempted", step=step, signal=int(stop), exit_code=EXIT_PREEMPTED)
            if main:
                print(
                    f"train.py: preempted by signal {int(stop)} at step {step}; checkpoint written, exiting with "
                    f"{EXIT_PREEMPTED} (rerun with --resume)",
                    file=sys.stderr,
                    flush=True,
                )
            break
    if bar is not None:
        bar.close()

    if exit_code == 0 and args.export:
        export(accelerator, model, tok, Path(args.export), args.method != "full")
        log.write(event="export", step=step, path=args.export)
    summary = summarize(accelerator, stats, step, flops, peak_tflops, predicted, predicted_src, use_cuda)
    log.write(event="summary", **summary)
    if main:
        print_summary(summary, strategy)
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return exit_code


def configure_deepspeed(accelerator, args, ga: int) -> None:
    """Fill what DeepSpeed needs before prepare, and refuse a config that disagrees with the flags."""
    cfg = accelerator.state.deepspeed_plugin.deepspeed_config
    cfg_ga = cfg.get("gradient_accumulation_steps", "auto")
    if cfg_ga != "auto" and int(cfg_ga) != ga:
        raise UserError(
            f"the DeepSpeed config sets gradient_accumulation_steps={cfg_ga} but --global-batch {args.global_batch} / "
            f"(--micro-batch {args.micro_batch} x {accelerator.num_processes} processes) = {ga}; make them agree"
        )
    cfg["gradient_accumulation_steps"] = ga
    if cfg.get("gradient_clipping", "auto") == "auto":
        cfg["gradient_clipping"] = args.max_grad_norm
    zero = cfg.setdefault("zero_optimization", {})
    if int(zero.get("stage", 0)) == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True  # so the final export can gather a full model
    cfg["zero_force_ds_cpu_optimizer"] = False  # our torch AdamW is fine with optimizer offload


def find_resume(args, out: Path) -> Path | None:
    if args.resume is None:
        found = latest_checkpoint(out)
        if found is not None:
            raise UserError(
                f"{str(out)!r} already holds checkpoint {found.name}; pass --resume to continue from it "
                "or choose an empty --output-dir"
            )
        return None
    if args.resume == "auto":
        return latest_checkpoint(out)
    path = Path(args.resume)
    if not (path / STATE_FILE).is_file():
        raise UserError(
            f"--resume {args.resume!r} is not a complete checkpoint (no {STATE_FILE}); "
            f"complete ones in {str(out)!r}: {[d.name for d in complete_checkpoints(out)] or 'none'}"
        )
    return path


def check_resume_compatible(state: dict, args, path: Path) -> None:
    for key in ("global_batch", "seq_len", "seed", "method", "dataset", "pack"):
        if key in state and state[key] != getattr(args, key):
            flag = "--" + key.replace("_", "-")
            raise UserError(
                f"checkpoint {str(path)!r} was written with {flag} {state[key]!r}, this run has "
                f"{getattr(args, key)!r}; resume with the same value (data order depends on it)"
            )
    if state["step"] > args.max_steps:
        raise UserError(f"checkpoint {str(path)!r} is at step {state['step']}, beyond --max-steps {args.max_steps}")


def save_checkpoint(accelerator, out: Path, step: int, args, world: int, ga: int, log: JsonLog) -> None:
    t0 = time.perf_counter()
    tmp, final = out / f"{TMP_PREFIX}{step:08d}", out / f"{CKPT_PREFIX}{step:08d}"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
    accelerator.wait_for_everyone()
    log.write(event="save_begin", step=step, path=str(tmp))
    try:
        accelerator.save_state(str(tmp))
        hook = os.environ.get("TRAIN_TEST_SLOW_SAVE", "")
        if hook and int(hook.split(":")[0]) == step:
            time.sleep(float(hook.split(":")[1]))
        accelerator.wait_for_everyone()
        pruned = []
        if accelerator.is_main_process:
            state = {
                "step": step,
                "world_size": world,
                "grad_accum": ga,
                "global_batch": args.global_batch,
                "seq_len": args.seq_len,
                "seed": args.seed,
                "method": args.method,
                "dataset": args.dataset,
                "pack": args.pack,
                "samples_consumed": step * args.global_batch,
                "time": time.time(),
            }
            pruned = publish_checkpoint(tmp, final, state, args.keep_last)
    except OSError as exc:
        prev = latest_checkpoint(out)
        raise UserError(
            f"writing checkpoint {str(tmp)!r} failed: {exc.strerror or exc}; the previous checkpoint "
            f"{str(prev) if prev else '(none)'} is intact"
        ) from None
    accelerator.wait_for_everyone()
    log.write(
        event="checkpoint",
        step=step,
        path=str(final),
        seconds=round(time.perf_counter() - t0, 3),
        pruned=[p.name for p in pruned],
    )


def export(accelerator, model, tok, path: Path, adapter_only: bool) -> None:
    """Full HF model (safetensors) or the LoRA adapter, written to a temporary directory and renamed into place."""
    state_dict = accelerator.get_state_dict(model)  # collective under FSDP / ZeRO-3: every rank calls it
    if accelerator.is_main_process:
        tmp = path.with_name(f".tmp-{path.name}")
        shutil.rmtree(tmp, ignore_errors=True)
        unwrapped = accelerator.unwrap_model(model)
        if adapter_only:
            save_adapter(unwrapped, state_dict, tmp)
        else:
            unwrapped.save_pretrained(str(tmp), state_dict=state_dict, safe_serialization=True)
        tok.save_pretrained(str(tmp))
        fsync_tree(tmp)
        old = path.with_name(f".old-{path.name}")
        if path.exists():
            os.rename(path, old)
        os.rename(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
        print(f"train.py: exported {'LoRA adapter' if adapter_only else 'model'} to {path}", flush=True)
    accelerator.wait_for_everyone()


def save_adapter(peft_model, state_dict: dict, out: Path) -> None:
    """adapter_config.json + adapter_model.safetensors, as PeftModel.save_pretrained writes them, from the gathered
    state dict. Written here because under FSDP2 peft's own save filtered the gathered dict down to nothing."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    adapter = get_peft_model_state_dict(peft_model, state_dict=state_dict)
    if not adapter:  # same rule as peft's: LoRA tensors, adapter name dropped from the key
        adapter = {k.replace(".default.", "."): v for k, v in state_dict.items() if "lora_" in k}
    if not adapter:
        raise RuntimeError(f"no LoRA weights among {len(state_dict)} gathered tensors; cannot export the adapter")
    out.mkdir(parents=True, exist_ok=True)
    peft_model.peft_config["default"].save_pretrained(str(out))
    save_file(
        {k: v.detach().cpu().contiguous() for k, v in adapter.items()},
        str(out / "adapter_model.safetensors"),
        metadata={"format": "pt"},
    )


def make_progress(main: bool, start: int, total: int):
    if not main:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=start, desc="train", unit="step", dynamic_ncols=True)


def step_record(step, loss, scheduler, grad_norm, elapsed, tokens, flops, peak_tflops) -> dict:
    tps = tokens / elapsed if elapsed > 0 else 0.0
    gn = float(grad_norm) if grad_norm is not None else None
    return {
        "step": step,
        "loss": loss,
        "lr": scheduler.get_last_lr()[0],
        "grad_norm": gn if gn is None or math.isfinite(gn) else None,
        "step_time_s": round(elapsed, 4),
        "tokens_per_s_per_gpu": tps,
        "mfu": (flops * tps / (peak_tflops * 1e12)) if peak_tflops else None,
    }


def memory_record(accelerator, use_cuda: bool) -> dict:
    if not use_cuda:
        return {"max_mem_allocated_gb": None, "max_mem_reserved_gb": None}
    import torch

    mine = (
        torch.tensor(
            [torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()],
            device=accelerator.device,
            dtype=torch.float64,
        )
        / 1e9
    )
    every = accelerator.gather(mine.unsqueeze(0)).view(-1, 2).tolist()
    return {
        "max_mem_allocated_gb": [round(a, 3) for a, _ in every],
        "max_mem_reserved_gb": [round(r, 3) for _, r in every],
    }


def summarize(accelerator, stats, step, flops, peak_tflops, predicted, predicted_src, use_cuda) -> dict:
    tps = stats["tokens"] / stats["seconds"] if stats["seconds"] else 0.0
    mem = memory_record(accelerator, use_cuda)
    return {
        "steps": step,
        "steps_this_run": len(stats["losses"]),
        "first_loss": stats["losses"][0] if stats["losses"] else None,
        "final_loss": stats["losses"][-1] if stats["losses"] else None,
        "tokens_per_s_per_gpu": tps,  # steady state: steps after this run's first
        "mfu": (flops * tps / (peak_tflops * 1e12)) if peak_tflops else None,
        "peak_mem_allocated_gb": max(mem["max_mem_allocated_gb"]) if use_cuda else None,
        "peak_mem_reserved_gb": max(mem["max_mem_reserved_gb"]) if use_cuda else None,
        "per_rank_mem_allocated_gb": mem["max_mem_allocated_gb"],
        "per_rank_mem_reserved_gb": mem["max_mem_reserved_gb"],
        "predicted_peak_gb": predicted,
        "predicted_source": predicted_src,
    }


def print_summary(s: dict, strategy: str) -> None:
    def fmt(v, spec):
        return "n/a" if v is None else format(v, spec)

    print(
        f"train.py summary ({strategy}): steps {s['steps']} ({s['steps_this_run']} this run), loss "
        f"{fmt(s['first_loss'], '.4f')} -> {fmt(s['final_loss'], '.4f')}, {s['tokens_per_s_per_gpu']:.0f} tokens/s "
        f"per GPU, MFU {fmt(s['mfu'], '.1%')}",
        flush=True,
    )
    print(
        f"train.py memory: measured peak allocated {fmt(s['peak_mem_allocated_gb'], '.2f')} GB (reserved "
        f"{fmt(s['peak_mem_reserved_gb'], '.2f')} GB); predicted peak {fmt(s['predicted_peak_gb'], '.2f')} GB "
        f"[{s['predicted_source']}]",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    try:
        return train(parse_args(argv))
    except UserError as exc:
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"train.py: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_USER_ERROR


if __name__ == "__main__":
    sys.exit(main())
