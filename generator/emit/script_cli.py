"""The launch line in the launched script's own terms (issue 25): TRL's CLI flags for `--script trainer`, and for
`--script custom` the launch line plus the few settings a plain Accelerate loop must use to match the plan.

TRL's flags were read in trl 1.16 (`trl/scripts/sft.py`, SFTConfig, ModelConfig; docs/scripts.md): the script is run
as a module (`accelerate launch -m trl.scripts.sft`), so the installed file runs unchanged wherever trl is installed.
"""

from __future__ import annotations

from generator.catalog import strategies as catalog
from generator.catalog.peft_moe import MOVED_NAMES, mlp_names_reach_linears
from generator.estimate.attention import ATTN_IMPLEMENTATION
from generator.estimate.scripts import TRL_DTYPE, lora_modules, script_facts
from generator.model.presets import launch_model
from generator.model.types import ModelSpec
from generator.plan.types import Plan

TRL_MODULE = "trl.scripts.sft"
"""TRL's own SFT script, shipped in its wheel; `accelerate launch -m` runs it as `python -m` would."""
TRL_DATA_ARGS = ("--dataset_name", "recipes/data/trl-chat", "--max_steps", "100", "--output_dir", "out/trl-sft")
"""What the printed TRL line trains on, for how long and where it writes (a hub id or a local dataset directory goes
in --dataset_name; recipes/data/trl-chat is the shipped synthetic chat set in the directory form datasets loads)."""
CUSTOM_SCRIPT = "your_training_loop.py"
"""Placeholder the custom line names when no --script-path is given."""


def fsdp_checkpoints(plan: Plan) -> bool:
    """Under FSDP the YAML's fsdp_activation_checkpointing does the recompute; the Trainer refuses its own on top
    (transformers trainer.py: both on is a ValueError), and a plain loop must not wrap twice either."""
    return plan.workload.grad_checkpointing and catalog.strategy(plan.strategy).framework == "fsdp"


def trl_args(plan: Plan) -> list[str]:
    """TRL CLI flags for every choice the plan made (after the script name)."""
    w = plan.workload
    trl_ckpt = w.grad_checkpointing and not fsdp_checkpoints(plan)
    args = [
        "--model_name_or_path", launch_model(plan.model.name),
        "--dtype", TRL_DTYPE[w.load_dtype],
        "--max_length", str(w.seq_len),
        "--packing",
        "--per_device_train_batch_size", str(w.micro_batch),
        "--gradient_accumulation_steps", str(w.grad_accum),
        # SFTConfig defaults it to True: always say which
        "--gradient_checkpointing", str(trl_ckpt),
        "--attn_implementation", ATTN_IMPLEMENTATION[w.attention],
        "--bf16", "True",
    ]  # fmt: skip
    if w.method != "full":
        args += ["--use_peft", "--lora_r", str(w.lora_r), "--lora_alpha", str(2 * w.lora_r)]
        args += ["--lora_target_modules", *_targets(plan.model, w.lora_targets)]
        args += ["--learning_rate", "2e-4"]
    else:
        args += ["--learning_rate", "1e-5"]
    if w.method == "qlora":
        args += ["--load_in_4bit", "--bnb_4bit_quant_type", "nf4", "--use_bnb_nested_quant"]
    if w.liger:
        args += ["--use_liger_kernel", "True"]
    return args


def _targets(model: ModelSpec, targets: tuple[str, ...]) -> list[str]:
    """peft's target_modules for the plan's adapters. An MoE is named, never all-linear (which would adapt its
    router), and without the MLP names peft would move onto its fused routed experts (catalog.peft_moe)."""
    if model.num_experts:
        kept = [t for t in targets if t not in MOVED_NAMES or mlp_names_reach_linears(model.model_type)]
        return lora_modules(tuple(kept) or targets)
    if targets == script_facts("train.py").lora_targets:
        return ["all-linear"]
    return lora_modules(targets)


def trainer_words(plan: Plan, extra: list[str]) -> list[str]:
    """What follows `accelerate launch --config_file C [flags]`: TRL's module (or the user's own TRL-style script)
    with its flags, then the data/run flags."""
    script = [plan.script_path] if plan.script_path else ["-m", TRL_MODULE]
    return [*script, *trl_args(plan), *(extra or TRL_DATA_ARGS)]


def custom_words(plan: Plan) -> list[str]:
    return [plan.script_path or CUSTOM_SCRIPT]


def loop_settings(plan: Plan) -> list[str]:
    """For `--script custom`: what the loop must do for the plan's predictions to hold (empty for other scripts)."""
    if plan.workload.script != "custom":
        return []
    w = plan.workload
    dtype = f"torch.{TRL_DTYPE[w.load_dtype]}"
    attn = ATTN_IMPLEMENTATION[w.attention]
    if not w.grad_checkpointing:
        ckpt = "activation checkpointing off"
    elif fsdp_checkpoints(plan):
        ckpt = "activation checkpointing on, done by FSDP (the YAML's fsdp_activation_checkpointing): do not also " \
            "call gradient_checkpointing_enable()"  # fmt: skip
    else:
        ckpt = "activation checkpointing on: model.gradient_checkpointing_enable() before accelerator.prepare"
    out = [
        f"DataLoader batch_size={w.micro_batch} per process, sequences of {w.seq_len} tokens",
        f"gradient accumulation {w.grad_accum} (Accelerator(gradient_accumulation_steps={w.grad_accum}) with "
        f"accelerator.accumulate(model)): global batch {plan.global_batch} sequences",
        ckpt,
        f"from_pretrained(..., dtype={dtype}, attn_implementation={attn!r})",
        "torch.optim.AdamW(params, lr=...) with torch's defaults (the estimate counts its foreach step)",
    ]
    if w.method != "full":
        named = _targets(plan.model, w.lora_targets)
        modules = "'all-linear'" if named == ["all-linear"] else repr(named)
        out.append(f"peft LoraConfig(r={w.lora_r}, target_modules={modules}, lora_dropout={w.lora_dropout:g})")
    if w.method == "qlora":
        out.append("BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4', bnb_4bit_use_double_quant=True)")
    if w.liger:
        out.append("liger_kernel's _apply_liger_kernel_to_instance(model) (its fused cross-entropy included)")
    return out
