"""train.py's command line: the flags, their defaults (some depend on --method), and the checks on their values."""

from __future__ import annotations

import argparse
import os

from generator.errors import UserError
from generator.estimate.types import DEFAULT_LOAD_DTYPE

DEFAULT_MODEL = "mistralai/Mistral-7B-v0.1"
DEFAULT_LORA_TARGETS = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
# Adapters train at a much larger step than full weights; a full fine-tune at 2e-4 diverges, LoRA at 1e-5 barely moves.
DEFAULT_LR = {"full": 1e-5, "lora": 2e-4, "qlora": 2e-4}
# --load-dtype auto per method, from the table the estimator also reads (one owner): full fine-tuning keeps fp32
# masters (pure-bf16 AdamW drops small updates); LoRA/QLoRA never update the base, so an fp32 copy of it only costs
# memory, and peft keeps the adapters in fp32 anyway (docs/train.md).


def _by_method(table: dict, fmt=str) -> str:
    """ "1e-5 for full, 2e-4 for lora/qlora": the help text for a default that depends on --method."""
    return f"{fmt(table['full'])} for full, {fmt(table['lora'])} for lora/qlora"


def _sci(x: float) -> str:
    return f"{x:.0e}".replace("e-0", "e-")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows every real default; flags whose default is worked out later (None) or is off (False) say so in words."""

    def _get_help_string(self, action):
        if action.default in (None, False):
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="train.py",
        description="Fine-tune a causal LM under any Accelerate config the generator emits (manual: docs/train.md).",
        formatter_class=_HelpFormatter,
    )
    a = p.add_argument
    a("--model", default=DEFAULT_MODEL, help="hub id or local directory (config.json + weights + tokenizer)")
    a("--init", choices=("pretrained", "random"), default="pretrained", help="random: the architecture, random weights")
    a("--dataset", default="recipes/data/synthetic_instruct.jsonl", help="hub name or local .jsonl/.json/.parquet")
    a("--method", choices=("full", "lora", "qlora"), default="full", help="what trains: all weights, or LoRA adapters")
    a("--seq-len", type=int, default=4096, help="tokens per sequence (packed block)")
    a("--micro-batch", type=int, default=1, help="sequences per GPU per forward/backward")
    a("--global-batch", type=int, default=16, help="sequences per optimizer step over all GPUs")
    a(
        "--grad-checkpointing",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="HF activation checkpointing (skipped when the FSDP config applies its own)",
    )
    a("--lr", type=float, default=None, help=f"peak learning rate (default: {_by_method(DEFAULT_LR, _sci)})")
    a("--warmup-steps", type=int, default=10, help="linear warm-up, then cosine decay to --max-steps")
    a("--max-steps", type=int, default=100, help="optimizer steps")
    a("--max-grad-norm", type=float, default=1.0, help="0 disables clipping (DeepSpeed 'auto' gets this value)")
    a("--seed", type=int, default=42, help="random init and data order")
    a("--save-every", type=int, default=0, help="checkpoint every N steps (0: only on preemption)")
    a("--keep-last", type=int, default=2, help="complete checkpoints to keep (0: keep all)")
    a("--output-dir", default="out/train", help="checkpoints, the log and the export")
    a(
        "--resume",
        nargs="?",
        const="auto",
        default=None,
        metavar="PATH",
        help="continue from the latest complete checkpoint in --output-dir (or PATH); start fresh if there is none",
    )
    a("--export", default=None, metavar="DIR", help="final HF model / LoRA adapter directory (default: OUTPUT/final)")
    a("--no-export", action="store_true", help="skip the final export")
    a("--liger", action="store_true", help="apply Liger kernels (pip install liger-kernel)")
    a(
        "--attn-implementation",
        choices=("sdpa", "flex_attention", "eager"),
        default="sdpa",
        help="attention kernel; flex_attention (GPU only) skips the blocks packing masks out instead of passing SDPA a "
        "dense mask, which rules out its flash kernel",
    )
    a(
        "--load-dtype",
        choices=("auto", "fp32", "bf16"),
        default="auto",
        help=f"dtype of the loaded weights; auto: {_by_method(DEFAULT_LOAD_DTYPE)} (fp32 masters for full fine-tuning, "
        "a bf16 frozen base under fp32 adapters)",
    )
    a(
        "--precision",
        choices=("bf16", "fp8"),
        default="bf16",
        help="fp8: the decoder's Linear layers (under LoRA, their frozen base) train in float8 through torchao "
        "(full and LoRA, compute capability 8.9+), each decoder layer compiled; a config with mixed_precision: fp8 "
        "means the same",
    )
    a(
        "--compile-layers",
        action="store_true",
        help="compile each decoder layer (always on with --precision fp8); with --liger, Liger then keeps only its "
        "fused cross-entropy, since compile fuses the norms, SwiGLU and RoPE itself",
    )
    a("--fp8-recipe", choices=("tensorwise", "rowwise"), default="tensorwise", help="torchao float8 scaling")
    a("--lora-r", type=int, default=16, help="LoRA rank")
    a("--lora-alpha", type=int, default=32, help="LoRA scaling numerator (scale = alpha / r)")
    a("--lora-targets", default=DEFAULT_LORA_TARGETS, help="comma list of module names, or all-linear")
    a("--pack", action=argparse.BooleanOptionalAction, default=True, help="pack examples, or pad each")
    a(
        "--fit-check",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="on a GPU, stop before loading when the generator's plan for exactly this run predicts more memory than "
        "the GPU has, naming what would fit (--no-fit-check: run it anyway)",
    )
    a("--log-file", default=None, help="per-step JSONL (default: OUTPUT/train_log.jsonl)")
    a("--log-sample-ids", action="store_true", help="record the sample ids of every step in the log")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags with every default resolved: --lr and --load-dtype hold the values the run uses, not "auto"."""
    args = build_parser().parse_args(argv)
    for name in ("seq_len", "micro_batch", "global_batch", "max_steps", "lora_r"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    for name in ("warmup_steps", "save_every", "keep_last"):
        if getattr(args, name) < 0:
            raise UserError(f"--{name.replace('_', '-')} must be 0 or more, got {getattr(args, name)}")
    if args.lr is None:
        args.lr = DEFAULT_LR[args.method]
    if args.load_dtype == "auto":
        args.load_dtype = DEFAULT_LOAD_DTYPE[args.method]
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
