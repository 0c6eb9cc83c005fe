"""What the two bench scripts (bench/scripts/trl_sft.py, bench/scripts/plain_loop.py) share: the command line the bench
drives them with, the global-batch arithmetic, dataset loading and the random-init model build.

Kept free of torch/transformers at import time, so a wrong flag fails before any heavy import.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import sys
from pathlib import Path

DEFAULT_MODEL = "mistralai/Mistral-7B-v0.1"
DEFAULT_DATASET = "recipes/data/synthetic_instruct.jsonl"
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
PROMPT_TEMPLATE = "### Instruction:\n{instruction}\n\n### Response:\n"  # train.py's, so the data reads the same
PAIR_COLUMNS = (("instruction", "response"), ("instruction", "output"), ("prompt", "completion"))
EXIT_USER_ERROR = 2


class ScriptError(Exception):
    """A mistake the user can fix; main() prints it as one line and exits 2."""


def add_bench_args(p: argparse.ArgumentParser, *, load_dtype: str, grad_checkpointing: bool, out: str) -> None:
    """The flags both scripts take. Defaults for load dtype and checkpointing are each library's own (the caller's)."""
    a = p.add_argument
    a("--model", default=DEFAULT_MODEL, help="hub id or local directory (config.json + tokenizer [+ weights])")
    a(
        "--init",
        choices=("pretrained", "random"),
        default="pretrained",
        help="random: from_config(AutoConfig.from_pretrained(MODEL)) in --load-dtype; needs no weights",
    )
    a("--method", choices=("full", "lora"), default="full")
    a("--lora-r", type=int, default=16)
    a("--lora-alpha", type=int, default=32)
    a("--seq-len", type=int, default=4096, help="tokens per packed sequence (exact: every block is full)")
    a("--micro-batch", type=int, default=1, help="sequences per GPU per forward/backward")
    batch = p.add_mutually_exclusive_group()
    batch.add_argument("--global-batch", type=int, default=None, help="sequences per optimizer step over all GPUs")
    batch.add_argument("--grad-accum", type=int, default=None, help="micro-steps per optimizer step (default 1)")
    a("--grad-checkpointing", action=argparse.BooleanOptionalAction, default=grad_checkpointing)
    a("--max-steps", type=int, default=20)
    a("--lr", type=float, default=2e-5)
    a("--max-grad-norm", type=float, default=1.0)
    a("--seed", type=int, default=42)
    a("--dataset", default=DEFAULT_DATASET, help="local .jsonl/.json/.parquet or a hub dataset name")
    a("--attn-implementation", choices=("sdpa", "flex_attention"), default="sdpa")
    a("--liger", action="store_true", help="Liger kernels (pip install liger-kernel)")
    a(
        "--load-dtype",
        choices=("fp32", "bf16"),
        default=load_dtype,
        help=f"parameter dtype the model is built in (default {load_dtype}: this script's library default)",
    )
    a("--output-dir", default=out)
    a("--log-file", default=None, help="per-step JSONL (default OUTPUT/steps.jsonl)")


def check_args(args: argparse.Namespace) -> argparse.Namespace:
    for name in ("seq_len", "micro_batch", "max_steps", "lora_r", "global_batch", "grad_accum"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ScriptError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if Path(args.dataset).suffix in (".jsonl", ".json", ".parquet") and not Path(args.dataset).is_file():
        raise ScriptError(f"--dataset {args.dataset!r} does not exist; give a local .jsonl/.json/.parquet or hub name")
    args.log_file = args.log_file or os.path.join(args.output_dir, "steps.jsonl")
    return args


def grad_accum_steps(args: argparse.Namespace, world: int) -> int:
    """--grad-accum as given, or global / (micro x processes), which must divide (the generator prints the same)."""
    if args.global_batch is None:
        return args.grad_accum or 1
    per_step = args.micro_batch * world
    if args.global_batch % per_step:
        raise ScriptError(
            f"--global-batch {args.global_batch} is not divisible by --micro-batch {args.micro_batch} x {world} "
            f"processes = {per_step}; use a multiple of {per_step}"
        )
    return args.global_batch // per_step


def check_deepspeed_launch(args: argparse.Namespace, ga: int) -> None:
    """Under a DeepSpeed launch, refuse a config whose accumulation or clipping disagrees with the flags, before any
    heavy import (what train.py's configure_deepspeed refuses). Otherwise the config wins silently: Accelerate takes
    the config's accumulation over `Accelerator(gradient_accumulation_steps=...)` (its ACCELERATE_GRADIENT_ACCUMULATION
    _STEPS variable), so the loop would step every micro-batch and log ga x the real tokens per step, and the Trainer
    stops at its first step on the mismatch. "auto" is left to the library, which fills it from the flags."""
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() != "true":
        return
    cfg = _deepspeed_file(os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE", "none"))
    cfg_ga = os.environ.get("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", cfg.get("gradient_accumulation_steps", "auto"))
    if str(cfg_ga) != "auto" and int(cfg_ga) != ga:
        raise ScriptError(
            f"the DeepSpeed config sets gradient_accumulation_steps={cfg_ga} but the flags give {ga} (--global-batch "
            f"{args.global_batch} / (--micro-batch {args.micro_batch} x processes), or --grad-accum); make them agree"
        )
    clip = os.environ.get("ACCELERATE_GRADIENT_CLIPPING", cfg.get("gradient_clipping", "auto"))
    if str(clip).lower() not in ("auto", "none") and float(clip) != args.max_grad_norm:
        raise ScriptError(
            f"the DeepSpeed config sets gradient_clipping={clip} but --max-grad-norm is {args.max_grad_norm}; "
            "make them agree (DeepSpeed clips, not the script)"
        )


def _deepspeed_file(path: str) -> dict:
    """The DeepSpeed JSON an Accelerate config names (deepspeed_config_file), {} when none or unreadable (DeepSpeed
    then reports it in its own words)."""
    if path == "none":
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def fill_deepspeed_clipping(accelerator, max_grad_norm: float) -> None:
    """An "auto" gradient_clipping takes --max-grad-norm, as train.py fills it; Accelerate would fill 1.0."""
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    if plugin is not None and plugin.deepspeed_config.get("gradient_clipping", "auto") == "auto":
        plugin.deepspeed_config["gradient_clipping"] = max_grad_norm


def torch_dtype(name: str):
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16}[name]


def load_rows(name: str):
    """A datasets.Dataset from a local file or the hub; ScriptError with the reason when it cannot be read."""
    import datasets

    datasets.disable_progress_bars()
    path = Path(name)
    kind = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}.get(path.suffix)
    try:
        if path.is_file():
            return datasets.load_dataset(kind, data_files=str(path), split="train")
        return datasets.load_dataset(name, split="train")
    except Exception as exc:  # datasets raises many types for a missing or malformed dataset
        raise ScriptError(f"cannot load dataset {name!r}: {first_line(exc)}") from None


def row_format(columns: list[str]) -> tuple[str, tuple[str, ...]]:
    """('chat', ('messages',)) | ('pair', (prompt, response)) | ('text', ('text',))."""
    if "messages" in columns:
        return "chat", ("messages",)
    for pair in PAIR_COLUMNS:
        if all(c in columns for c in pair):
            return "pair", pair
    if "text" in columns:
        return "text", ("text",)
    raise ScriptError(
        f"dataset has no usable column (found {sorted(columns)}); expected 'text', 'messages' or an instruction pair "
        "(instruction/response, instruction/output, prompt/completion)"
    )


def encode_rows(rows, tok) -> list[tuple[list[int], list[int]]]:
    """(input_ids, labels) per example, as TRL's defaults train them: a prompt/completion pair trains the completion
    only (completion_only_loss defaults on for that format), chat and plain text train every token
    (assistant_only_loss defaults off). EOS closes every example (chat templates write their own)."""
    kind, cols = row_format(list(rows.column_names))
    out = []
    for row in rows:
        if kind == "chat":
            ids = tok(tok.apply_chat_template(row[cols[0]], tokenize=False), add_special_tokens=False)["input_ids"]
            out.append((ids, list(ids)))
        elif kind == "pair":
            prompt = tok(PROMPT_TEMPLATE.format(instruction=row[cols[0]]))["input_ids"]
            completion = tok(row[cols[1]], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            out.append((prompt + completion, [-100] * len(prompt) + completion))
        else:
            ids = tok(row[cols[0]])["input_ids"] + [tok.eos_token_id]
            out.append((ids, list(ids)))
    return out


def pack_blocks(examples: list[tuple[list[int], list[int]]], seq_len: int) -> dict[str, list]:
    """Concatenate the examples and cut them into full blocks of seq_len tokens (the tail is dropped). Returns
    input_ids, labels and seq_lengths (the lengths of the example pieces inside each block, what TRL's packer
    records and its padding-free collator turns into position_ids). An example crossing a block boundary is split,
    as TRL's "bfd_split" splits an overflowing one."""
    ids = [t for x, _ in examples for t in x]
    labels = [t for _, y in examples for t in y]
    n = len(ids) // seq_len
    if n == 0:
        raise ScriptError(f"dataset has {len(ids)} tokens, fewer than one --seq-len {seq_len} block")
    ends, at = [], 0
    for x, _ in examples:
        at += len(x)
        ends.append(at)
    seq_lengths = []
    for b in range(n):
        lo, hi = b * seq_len, (b + 1) * seq_len
        cuts = [lo] + ends[bisect.bisect_right(ends, lo) : bisect.bisect_left(ends, hi)] + [hi]
        seq_lengths.append([q - p for p, q in zip(cuts, cuts[1:], strict=False)])
    cut = n * seq_len
    return {
        "input_ids": [ids[i : i + seq_len] for i in range(0, cut, seq_len)],
        "labels": [labels[i : i + seq_len] for i in range(0, cut, seq_len)],
        "seq_lengths": seq_lengths,
    }


def whole_steps(n_blocks: int, per_step: int, seq_len: int) -> int:
    """How many blocks make whole optimizer steps: a short last step would hold fewer tokens than the log counts."""
    if n_blocks < per_step:
        raise ScriptError(
            f"{n_blocks} blocks of {seq_len} tokens are fewer than one optimizer step of {per_step} sequences; "
            "use more data or a smaller --seq-len / --global-batch"
        )
    return n_blocks // per_step * per_step


def load_config_and_tokenizer(model: str):
    from transformers import AutoConfig, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(model)
        tok = AutoTokenizer.from_pretrained(model)
    except Exception as exc:
        raise ScriptError(f"cannot load model {model!r}: {first_line(exc)}") from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return config, tok


def random_model(config, load_dtype: str, attn_implementation: str):
    """AutoModelForCausalLM.from_config with the dtype the pretrained path loads in. Without `dtype`, from_config
    follows config.dtype: bf16 for Mistral-7B's hub config.json, fp32 for a config that names none (the bench's
    config-only directory), so the dtype is always passed (docs/scripts.md).
    Built on this rank's GPU when there is one, as train.py builds a random init: 7B in fp32 on the host costs every
    rank ~30 GB of RAM and tens of seconds, and there are no weights to read that would favour the CPU."""
    import torch
    from transformers import AutoModelForCausalLM

    device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        return AutoModelForCausalLM.from_config(
            config, dtype=torch_dtype(load_dtype), attn_implementation=attn_implementation
        )


def lora_config(args: argparse.Namespace):
    from peft import LoraConfig

    return LoraConfig(
        r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=0.0, target_modules=LORA_TARGETS, task_type="CAUSAL_LM"
    )


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def note_cpu_fallback(name: str, use_cuda: bool) -> None:
    """Without a GPU, Accelerate runs an FSDP or DeepSpeed config as DDP over gloo (the scripts pass cpu=True, as
    train.py does); say so rather than let a CPU test pass for an FSDP run."""
    asked = [k for k in ("ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED") if os.environ.get(k, "").lower() == "true"]
    if asked and not use_cuda and int(os.environ.get("RANK", "0")) == 0:
        print(f"{name}: note: the config asks for {asked[0][15:].lower()} but there is no GPU; running DDP over gloo")


def run_main(name: str, fn) -> None:
    """Call fn(); a ScriptError becomes one line on stderr (rank 0) and exit code 2, without a traceback."""
    try:
        code = fn()
    except ScriptError as exc:
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"{name}: error: {exc}", file=sys.stderr, flush=True)
        code = EXIT_USER_ERROR
    sys.exit(code or 0)
