"""The bench's SFTTrainer script: TRL's SFTTrainer under a config the generator writes, fed pre-packed full blocks so
every step trains exactly micro-batch x seq-len tokens (the `trainer` rows of bench/sweep.py; docs/scripts.md). Users
run TRL's own CLI script instead (`plan --script trainer` prints that line; recipes/trl-sft/README.md), which the
bench runs unchanged in bench/trl_cli.py.

    CUDA_DEVICE_ORDER=PCI_BUS_ID accelerate launch --config_file CONFIG.yaml bench/scripts/trl_sft.py \
        --model mistralai/Mistral-7B-v0.1 --method lora --seq-len 4096 --micro-batch 1 --global-batch 16

What a user typically writes: an SFTConfig (bf16=True, gradient_checkpointing as given, per_device_train_batch_size,
packed sequences of --seq-len tokens, padding-free as TRL's default "bfd" packing turns it on) and, for LoRA, a peft
LoraConfig passed as `peft_config`. Everything else is TRL's and transformers' default: the optimizer
(adamw_torch_fused), the DDP kwargs, the loss (TRL's chunked fused LM head), the dtype a model named by a string loads
in (float32 unless --load-dtype bf16). docs/scripts.md lists what those defaults are, with file and line.

Three things differ from a bare user script, each for measurement only:
- the blocks are packed here, full: TRL's best-fit-decreasing packer fills bins only up to --seq-len (on the small
  synthetic sets most bins are short), so this script concatenates the tokenized examples into full blocks and hands
  TRL the columns its packer would write (input_ids, labels, seq_lengths) with padding_free=True; the model then
  sees what it sees after TRL's own packing (one flattened row per micro-batch, position_ids restarting per example)
  and tokens per step = micro-batch x accumulation x seq-len exactly (whole optimizer steps only). Loss masks follow
  TRL's defaults: completion only for prompt/completion pairs, every token for chat and text;
- `device_map=None` in model_init_kwargs: TRL sets it only for MULTI_GPU / DeepSpeed launches and otherwise asks for
  device_map="auto" on a GPU, which under an FSDP launch would spread every rank's copy over all visible GPUs;
- a TrainerCallback writes one JSON line per optimizer step (bench/scripts/steplog.py), timed from on_step_begin to
  on_step_end with the GPU synchronised at both ends (the micro-batches are fetched before on_step_begin).
--init random builds the architecture with from_config in --load-dtype and hands TRL the model object.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # launched as a file: make bench/ (the shared step log) and generator/ importable
    sys.path.insert(0, str(REPO))

from bench.scripts import common, steplog  # noqa: E402
from bench.scripts.common import ScriptError  # noqa: E402
from generator.estimate.scripts import TRL_DTYPE  # noqa: E402
from training.process_group import import_group_binders  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="TRL SFTTrainer fine-tune (see the module docstring).")
    # fp32: what SFTTrainer loads a model given by name in (trl create_model_from_path); checkpointing on: SFTConfig's
    common.add_bench_args(p, load_dtype="fp32", grad_checkpointing=True, out="out/trl-sft")
    return common.check_args(p.parse_args(argv))


def packed_dataset(name: str, tok, seq_len: int, per_step: int):
    """Full blocks of seq_len tokens in the columns TRL's own packer produces (input_ids, labels, seq_lengths), as
    many as make whole optimizer steps. TRL's padding-free collator then does what it does after its "bfd" packing:
    flattens each micro-batch into one row with position_ids restarting at every example."""
    import datasets

    blocks = common.pack_blocks(common.encode_rows(common.load_rows(name), tok), seq_len)
    keep = common.whole_steps(len(blocks["input_ids"]), per_step, seq_len)
    return datasets.Dataset.from_dict({k: v[:keep] for k, v in blocks.items()})


def step_logger(args, ga: int, flops: float | None):
    from transformers import TrainerCallback

    class StepLogCallback(TrainerCallback):
        """Times each optimizer step and writes it with the loss the Trainer logs right after on_step_end."""

        trainer = None  # set once the trainer exists: the wrapped model and optimizer are read off it

        def __init__(self):
            tokens = steplog.tokens_per_step_per_gpu(args.micro_batch, ga, args.seq_len)
            self.log = steplog.StepLog(args.log_file, int(os.environ.get("RANK", "0")) == 0, tokens, flops)
            self.t0, self.pending, self.started = 0.0, None, False

        def on_step_begin(self, targs, state, control, **kw):
            if not self.started:  # the first point where the model and optimizer are prepared
                self.started = True
                self.log.start(
                    script="trainer",
                    load_dtype=args.load_dtype,
                    method=args.method,
                    **steplog.trainer_facts(self.trainer, targs),
                )
            steplog.sync()
            self.t0 = time.perf_counter()

        def on_step_end(self, targs, state, control, **kw):
            steplog.sync()
            elapsed = time.perf_counter() - self.t0
            self.pending = (state.global_step, elapsed, steplog.memory_per_rank())  # the gather runs on every rank

        def on_log(self, targs, state, control, logs=None, **kw):
            if self.pending and logs and "loss" in logs and self.pending[0] == state.global_step:
                step, elapsed, memory = self.pending
                lr, grad_norm = logs.get("learning_rate"), logs.get("grad_norm")
                self.log.step(step, float(logs["loss"]), elapsed, memory, lr=lr, grad_norm=grad_norm)
                self.pending = None

        def on_train_end(self, targs, state, control, **kw):
            self.log.summary(steplog.memory_per_rank(), script="trainer")

    return StepLogCallback()


def fsdp_checkpoints() -> bool:
    """True when the launch's FSDP config checkpoints activations itself (`fsdp_activation_checkpointing: true`, which
    the generator writes whenever checkpointing is on; accelerate launch exports it as FSDP_ACTIVATION_CHECKPOINTING,
    accelerate/utils/launch.py 330). Trainer then refuses `gradient_checkpointing=True` with a ValueError
    (transformers/trainer.py 879-884 in 5.24; the same check in 5.17), so it must be left to FSDP, as train.py does."""
    return os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true" and (
        os.environ.get("FSDP_ACTIVATION_CHECKPOINTING", "").lower() == "true"
    )


def train(args: argparse.Namespace) -> int:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    ga = common.grad_accum_steps(args, world)  # a bad batch fails before the heavy imports
    common.check_deepspeed_launch(args, ga)  # "auto" fields the Trainer fills from its arguments itself
    if args.liger and importlib.util.find_spec("liger_kernel") is None:
        raise ScriptError("--liger needs liger-kernel: pip install liger-kernel")
    import_group_binders()  # before SFTConfig starts the group, or it outlives end_training (training/process_group.py)
    import torch
    from trl import SFTConfig, SFTTrainer

    use_cuda = torch.cuda.is_available()
    if args.attn_implementation == "flex_attention" and not use_cuda:
        raise ScriptError("--attn-implementation flex_attention has no CPU backward in torch; use sdpa on CPU")
    common.note_cpu_fallback("sft.py", use_cuda)
    config, tok = common.load_config_and_tokenizer(args.model)
    if args.seq_len > getattr(config, "max_position_embeddings", args.seq_len):
        raise ScriptError(f"--seq-len {args.seq_len} is above {args.model!r}'s max_position_embeddings")

    sft_args = SFTConfig(
        output_dir=args.output_dir,
        per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=ga,
        max_steps=args.max_steps,
        learning_rate=args.lr,
        max_grad_norm=args.max_grad_norm,
        bf16=True,
        # Under an FSDP config that checkpoints, FSDP does it (fsdp_checkpoints); HF checkpointing on top is refused.
        gradient_checkpointing=args.grad_checkpointing and not fsdp_checkpoints(),
        # Pre-packed full blocks (see the module docstring): TRL's padding-free path without its packer, which needs
        # max_length=None and the preparation skipped.
        max_length=None,
        padding_free=True,
        dataset_kwargs={"skip_prepare_dataset": True},
        use_liger_kernel=args.liger,
        model_init_kwargs={
            "dtype": TRL_DTYPE[args.load_dtype],
            "attn_implementation": args.attn_implementation,
            "device_map": None,
        },
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=args.seed,
        use_cpu=not use_cuda,
    )
    if args.init == "random":
        torch.manual_seed(args.seed)  # the same init on every rank (DDP also broadcasts rank 0's)
        model = common.random_model(config, args.load_dtype, args.attn_implementation)
        sft_args.model_init_kwargs = None  # TRL warns when they come with a built model
    else:
        model = args.model
    cb = step_logger(args, ga, steplog.flops_per_token(config, args.model, args.seq_len))
    try:
        trainer = SFTTrainer(
            model=model,
            args=sft_args,
            train_dataset=packed_dataset(args.dataset, tok, args.seq_len, args.micro_batch * world * ga),
            processing_class=tok,
            peft_config=common.lora_config(args) if args.method == "lora" else None,
            callbacks=[cb],
        )
    except (OSError, ValueError) as exc:
        raise ScriptError(f"SFTTrainer could not start: {common.first_line(exc)}") from None
    cb.trainer = trainer
    trainer.train()
    # The DDP wrapper before the process group, as train.py does: a Reducer that outlives the group joins gloo's
    # threads at exit holding the GIL (pytorch/pytorch#56297). The callback and the trainer refer to each other.
    accelerator = trainer.accelerator
    accelerator.wait_for_everyone()
    cb.trainer = trainer = model = None
    gc.collect()
    accelerator.free_memory()
    accelerator.end_training()
    return 0


def main(argv: list[str] | None = None) -> None:
    common.run_main("sft.py", lambda: train(parse_args(argv)))


if __name__ == "__main__":
    main()
