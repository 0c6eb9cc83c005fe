"""A plain Accelerate training loop, written the way people write one (the `custom` script of docs/scripts.md).

    CUDA_DEVICE_ORDER=PCI_BUS_ID accelerate launch --config_file CONFIG.yaml bench/scripts/plain_loop.py \
        --model mistralai/Mistral-7B-v0.1 --seq-len 4096 --micro-batch 1 --global-batch 16 --max-steps 20

What it does on purpose, because users do (and the estimator's `custom` terms model exactly this):
- `AutoModelForCausalLM.from_pretrained(model)` in bf16 (--load-dtype; transformers 5's default dtype="auto" gives
  bf16 for Mistral-7B's bf16 checkpoint), so DDP trains pure bf16: no fp32 master weights (FSDP2 under a bf16 config
  still upcasts the trainable parameters to fp32, see docs/scripts.md).
- `torch.optim.AdamW(model.parameters(), lr=...)`: every other argument left at torch's default (weight_decay 0.01,
  neither foreach nor fused given, so torch picks foreach on CUDA tensors).
- `Accelerator(gradient_accumulation_steps=...)` with no kwargs handlers: DDP gets torch's defaults
  (gradient_as_bucket_view=False, bucket_cap_mb=25, broadcast_buffers=True, find_unused_parameters=False).
- The model's own loss (`labels=input_ids`), which upcasts the full logits to fp32.
- Data as in transformers' run_clm_no_trainer example: every example tokenized, concatenated and cut into --seq-len
  blocks, labels = input_ids; no attention mask and no position_ids, so attention is plain causal over the whole block
  (no per-document boundaries, unlike train.py's and TRL's packing). Only whole optimizer steps of full blocks are
  used, so tokens per step = micro-batch x accumulation x seq-len exactly.
Optional: --grad-checkpointing (HF checkpointing with its default use_reentrant=False), --method lora (peft LoRA on
the attention and MLP projections), --liger, --attn-implementation flex_attention.

Log: bench/scripts/steplog.py (one JSON line per optimizer step, the fields the bench reads).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # launched as a file by `accelerate launch`: make bench/ and generator/ importable
    sys.path.insert(0, str(REPO))

from bench.scripts import common, steplog  # noqa: E402
from bench.scripts.common import ScriptError  # noqa: E402
from training.process_group import import_group_binders  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="A plain Accelerate training loop (see the module docstring).")
    common.add_bench_args(p, load_dtype="bf16", grad_checkpointing=False, out="out/plain_loop")
    a = p.add_argument
    a("--warmup-steps", type=int, default=0)
    return common.check_args(p.parse_args(argv))


def token_blocks(rows, tok, seq_len: int):
    """[n, seq_len] int64: every example tokenized, concatenated and cut into full blocks (the tail is dropped)."""
    import torch

    return torch.tensor(common.pack_blocks(common.encode_rows(rows, tok), seq_len)["input_ids"], dtype=torch.long)


class Blocks:
    """Map-style dataset over the blocks; input_ids and labels are the same tensor (the model shifts)."""

    def __init__(self, blocks):
        self.blocks = blocks

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.blocks[i], "labels": self.blocks[i]}


def build_model(args, config, use_cuda: bool):
    if args.attn_implementation == "flex_attention" and not use_cuda:
        raise ScriptError("--attn-implementation flex_attention has no CPU backward in torch; use sdpa on CPU")
    if args.init == "random":
        model = common.random_model(config, args.load_dtype, args.attn_implementation)
    else:
        from transformers import AutoModelForCausalLM

        try:
            model = AutoModelForCausalLM.from_pretrained(
                args.model, dtype=common.torch_dtype(args.load_dtype), attn_implementation=args.attn_implementation
            )
        except (OSError, ValueError) as exc:
            raise ScriptError(
                f"cannot load weights of {args.model!r}: {common.first_line(exc)} (--init random needs none)"
            ) from None
    model.config.use_cache = False
    if args.liger:
        try:
            from liger_kernel.transformers import _apply_liger_kernel_to_instance
        except ImportError:
            raise ScriptError("--liger needs liger-kernel: pip install liger-kernel") from None
        _apply_liger_kernel_to_instance(model=model)
    if args.grad_checkpointing:
        # transformers 5.24 names it activation_checkpointing_enable; 5.17 (the GPU image) only has the old name.
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
    if args.method == "lora":
        from peft import get_peft_model

        model = get_peft_model(model, common.lora_config(args))
    return model


def train(args: argparse.Namespace) -> int:
    ga = common.grad_accum_steps(args, int(os.environ.get("WORLD_SIZE", "1")))  # a bad batch fails before imports
    common.check_deepspeed_launch(args, ga)
    import torch
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from transformers import get_scheduler

    use_cuda = torch.cuda.is_available()
    common.note_cpu_fallback("plain_loop.py", use_cuda)
    import_group_binders()  # before the group starts, or it outlives end_training (training/process_group.py)
    accelerator = Accelerator(gradient_accumulation_steps=ga, cpu=not use_cuda)
    common.fill_deepspeed_clipping(accelerator, args.max_grad_norm)
    set_seed(args.seed)
    config, tok = common.load_config_and_tokenizer(args.model)
    with accelerator.main_process_first():
        blocks = token_blocks(common.load_rows(args.dataset), tok, args.seq_len)
    model = build_model(args, config, use_cuda)

    blocks = blocks[: common.whole_steps(len(blocks), args.micro_batch * accelerator.num_processes * ga, args.seq_len)]
    g = torch.Generator().manual_seed(args.seed)
    loader = torch.utils.data.DataLoader(Blocks(blocks), batch_size=args.micro_batch, shuffle=True, generator=g)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    # accelerate steps a prepared scheduler once per process per optimizer step (run_clm_no_trainer scales the same way)
    scheduler = get_scheduler(
        "linear",
        optimizer,
        num_warmup_steps=args.warmup_steps * accelerator.num_processes,
        num_training_steps=args.max_steps * accelerator.num_processes,
    )
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)

    tokens = steplog.tokens_per_step_per_gpu(args.micro_batch, ga, args.seq_len)
    log = steplog.StepLog(
        args.log_file, accelerator.is_main_process, tokens, steplog.flops_per_token(config, args.model, args.seq_len)
    )
    log.start(
        script="custom",
        world_size=accelerator.num_processes,
        grad_accum=ga,
        distributed_type=str(accelerator.distributed_type),
        mixed_precision=accelerator.mixed_precision,
        load_dtype=args.load_dtype,
        method=args.method,
        grad_checkpointing=args.grad_checkpointing,
        blocks=len(blocks),
        ddp=steplog.ddp_settings(model),
        **steplog.optimizer_settings(optimizer),
        **steplog.param_dtypes(model),
    )

    step, micro, loss_sum = 0, 0, torch.zeros((), device=accelerator.device)
    model.train()
    steplog.sync()
    t0 = time.perf_counter()
    while step < args.max_steps:
        for batch in loader:
            with accelerator.accumulate(model):
                out = model(**batch)
                accelerator.backward(out.loss)
                grad_norm = None
                if accelerator.sync_gradients and args.max_grad_norm > 0:
                    grad_norm = accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            loss_sum += out.loss.detach().float()
            micro += 1
            if not accelerator.sync_gradients:
                continue
            steplog.sync()
            elapsed = time.perf_counter() - t0
            step += 1
            loss = accelerator.reduce(loss_sum / micro, "mean").item()
            memory = steplog.memory_per_rank()
            log.step(step, loss, elapsed, memory, lr=scheduler.get_last_lr()[0], grad_norm=_float(grad_norm))
            loss_sum.zero_()
            micro = 0
            if step >= args.max_steps:
                break
            t0 = time.perf_counter()
    log.summary(steplog.memory_per_rank(), script="custom")
    accelerator.wait_for_everyone()
    # the DDP wrapper before the process group, as train.py does (a rank can hang at exit over gloo otherwise)
    model = optimizer = loader = scheduler = None  # noqa: F841
    accelerator.free_memory()
    accelerator.end_training()
    return 0


def _float(x) -> float | None:
    return None if x is None else float(x)


def main(argv: list[str] | None = None) -> None:
    common.run_main("plain_loop.py", lambda: train(parse_args(argv)))


if __name__ == "__main__":
    main()
