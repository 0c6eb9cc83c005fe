"""What the training script launched with the YAML does that the estimate depends on (`--script`).

The generator's YAML is launched with train.py, with transformers' Trainer / TRL's SFTTrainer, or with a hand-written
Accelerate loop; each makes different choices the config cannot see. Every default below was read in the installed
sources (torch 2.13, transformers 5.24 / 5.17, accelerate 1.15, trl 1.16, peft 0.21); docs/scripts.md gives the file
and line of each. Pure data: the estimator's terms read these facts, they hold no numbers of their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from generator.estimate.types import DEFAULT_LOAD_DTYPE

Script = Literal["train.py", "trainer", "custom"]
"""train.py (this repository's), trainer (transformers Trainer / TRL SFTTrainer), custom (a plain Accelerate loop)."""
SCRIPTS: tuple[str, ...] = get_args(Script)
ALL_LINEAR = ("q", "k", "v", "o", "gate", "up", "down")
"""Every linear projection of a decoder layer (MoE experts are not adapted: estimate.lora_targets.lora_params)."""
QV = ("q", "v")
"""peft's default LoRA targets for llama-family models."""


@dataclass(frozen=True)
class ScriptFacts:
    """The choices one kind of training script makes, with their library defaults."""

    name: str
    """The --script value."""
    summary: str
    """One line for the YAML header and the plan: what is assumed."""
    adamw: Literal["fused", "foreach"]
    """torch AdamW implementation. fused: one `_fused_adamw_` kernel per dtype group, no full-size temporaries
    (train.py; Trainer's `adamw_torch_fused` default, training_args.py 806-815). foreach: torch.optim.AdamW's default
    on CUDA (adam.py 935-947), whose step allocates one full-size `_foreach_sqrt` of the second moment per group and
    streams every state through ~8 separate passes (adam.py 704-800)."""
    weight_decay: bool
    """Decoupled weight decay applied (one more pass over the parameters in the foreach step): torch AdamW's default
    1e-2 (adamw.py 20-38); Trainer's default is 0.0 (training_args.py 822-841)."""
    grad_as_bucket_view: bool
    """DDP gradient_as_bucket_view: train.py turns it on; Accelerate passes torch's default False (dataclasses.py
    78-88) and Trainer never sets it (trainer.py 749-766), so the Reducer keeps a second gradient-sized buffer."""
    load_dtype: Literal["fp32", "bf16"]
    """dtype the weights load in when the user does not say: train.py fp32; TRL loads a model named by a string in
    float32 (trl/trainer/utils.py 1332-1342); from_pretrained's "auto" gives the checkpoint's bf16 for a plain loop
    (modeling_utils.py 4185-4187)."""
    load_dtype_lever: bool
    """The planner sets the load dtype through the script's own flag (train.py --load-dtype, TRL's CLI --dtype) and,
    for LoRA and QLoRA, loads the frozen base in bf16 as train.py does (DEFAULT_LOAD_DTYPE); a plain loop loads what
    its code loads, declared with --load-dtype."""
    fused_lm_head: bool
    """The loss never builds the [tokens, vocab] logits: TRL's chunked fused LM head (sft_trainer.py 1142-1147,
    trl/trainer/utils.py 1548-1700) computes log-probs tile by tile. Otherwise transformers' ForCausalLMLoss keeps
    bf16 logits and their fp32 upcast (loss_utils.py 61)."""
    # -- the levers the script has: the planner chooses only among these (issue 25) --
    attentions: tuple[str, ...]
    """Attention kernels the script can be told to use without editing it (Workload.attention values). train.py and
    TRL's CLI take sdpa or flex (`--attn-implementation` / `--attn_implementation flex_attention`); a plain loop
    uses what its from_pretrained call names, SDPA (transformers' default) unless the user declares otherwise."""
    liger: Literal["full", "kernels", "none"]
    """What turning Liger on means there. full: RMSNorm/SwiGLU/RoPE kernels and the fused linear cross-entropy
    (train.py; `_apply_liger_kernel_to_instance`'s default, what a plain loop calling it gets). kernels: the
    Trainer's `use_liger_kernel` with TRL's own loss kept (SFTTrainer passes fused_linear_cross_entropy=False,
    sft_trainer.py 1125-1140), so the logits saving does not happen. none: no switch the planner can pull; a plain
    loop that declares it applies Liger (`--liger`) is taken to call `_apply_liger_kernel_to_instance` (full)."""
    fp8: bool
    """A float8 training path the planner may pick: train.py's torchao conversion only. The Trainer's bf16=True
    overrides the config's mixed_precision (training_args.py 1612-1618), so an fp8 YAML does not reach it."""
    compile_layers: bool
    """A switch that compiles each decoder layer, which the planner may pull: train.py's --compile-layers (regional
    compile in place, training/precision.py). TRL's CLI and a plain loop compile nothing per layer (TRL's
    --torch_compile compiles the whole model, unmeasured here)."""
    lora_targets: tuple[str, ...]
    """LoRA's adapted projections when the user names none (short names q, k, v, o, gate, up, down): train.py all
    linear layers; TRL (`lora_target_modules=None`) and a bare peft LoraConfig take peft's per-architecture default,
    q_proj and v_proj for Mistral/Llama/Qwen2/Mixtral (peft/utils/constants.py
    TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING)."""
    lora_dropout: float
    """LoRA dropout: train.py 0; TRL's CLI 0.05 (ModelConfig.lora_dropout); peft's LoraConfig default 0."""
    kbit_upcast: bool
    """QLoRA: the script calls peft's prepare_model_for_kbit_training, which casts every unquantised parameter to fp32
    (train.py: training/model.py; peft's QLoRA recipe, which a plain loop is taken to follow); TRL 1.16's SFTTrainer
    calls only get_peft_model (sft_trainer.py 843-869), so its embeddings and norms keep the load dtype."""
    flattens_micro_batch: bool
    """The micro-batch reaches attention as one row of micro-batch x seq-len tokens: TRL's padding-free collator
    (on whenever packing is "bfd", the CLI's --packing default) concatenates the examples with restarting
    position_ids and no attention mask (sft_trainer.py 168-227); transformers then derives a block-diagonal mask over
    the whole row for SDPA, eager and flex (masking_utils.py 735-765, 862-870). train.py and the bench's plain loop
    feed separate rows."""


FACTS: dict[str, ScriptFacts] = {
    "train.py": ScriptFacts(
        name="train.py",
        summary="train.py: fused AdamW, DDP gradient_as_bucket_view on, fp32 load for a full fine-tune and bf16 for a "
        "LoRA or QLoRA base by default",
        adamw="fused",
        weight_decay=False,
        grad_as_bucket_view=True,
        load_dtype="fp32",
        load_dtype_lever=True,
        fused_lm_head=False,
        attentions=("sdpa", "flex"),
        liger="full",
        fp8=True,
        compile_layers=True,
        lora_targets=ALL_LINEAR,
        lora_dropout=0.0,
        kbit_upcast=True,
        flattens_micro_batch=False,
    ),
    "trainer": ScriptFacts(
        name="trainer",
        summary="transformers Trainer / TRL SFTTrainer: fused AdamW (adamw_torch_fused), DDP bucket view off, "
        "float32 load unless --dtype says otherwise (TRL), TRL's chunked LM-head loss",
        adamw="fused",
        weight_decay=False,
        grad_as_bucket_view=False,
        load_dtype="fp32",
        load_dtype_lever=True,
        fused_lm_head=True,
        attentions=("sdpa", "flex"),
        liger="kernels",
        fp8=False,
        compile_layers=False,
        lora_targets=QV,
        lora_dropout=0.05,
        kbit_upcast=False,
        flattens_micro_batch=True,
    ),
    "custom": ScriptFacts(
        name="custom",
        summary="plain Accelerate loop: torch.optim.AdamW defaults (foreach), DDP bucket view off, bf16 load "
        "(from_pretrained's checkpoint dtype)",
        adamw="foreach",
        weight_decay=True,
        grad_as_bucket_view=False,
        load_dtype="bf16",
        load_dtype_lever=False,
        fused_lm_head=False,
        attentions=("sdpa",),
        liger="none",
        fp8=False,
        compile_layers=False,
        lora_targets=QV,
        lora_dropout=0.0,
        kbit_upcast=True,
        flattens_micro_batch=False,
    ),
}


def script_facts(name: str) -> ScriptFacts:
    """The facts of `name` (one of SCRIPTS); a ValueError names the choices otherwise."""
    try:
        return FACTS[name]
    except KeyError:
        raise ValueError(f"unknown script '{name}' (one of {', '.join(SCRIPTS)})") from None


def compiles_layers(script: str) -> bool:
    """The script has a lever that runs its decoder layers compiled (float8 or --compile-layers): an estimate of a
    workload under it can price a compiled layer, so sizing counts one (model.loading.load_model's `compiled`). A plan
    sizes with them whatever its script: it prices train.py's levers beside the script's own (plan.script_levers)."""
    facts = script_facts(script)
    return facts.fp8 or facts.compile_layers


def default_load_dtype(script: str, method: str) -> str:
    """What a script loads the weights in when the user does not say (--load-dtype auto): train.py resolves it per
    method (fp32 masters for full, a bf16 frozen base under fp32 adapters: training/args.py), the others load what
    their library loads whatever the method (ScriptFacts.load_dtype)."""
    return DEFAULT_LOAD_DTYPE[method] if script == "train.py" else script_facts(script).load_dtype


TRL_DTYPE: dict[str, str] = {"fp32": "float32", "bf16": "bfloat16"}
"""Each load dtype as TRL's CLI (`--dtype`) and torch name it."""
LOAD_DTYPE_OF: dict[str, str] = {name: dtype for dtype, name in TRL_DTYPE.items()}
"""The load dtype a TRL / torch dtype name stands for (reading a printed `--dtype` back)."""


def planned_load_dtype(script: str, method: str) -> str:
    """What the planner loads the weights in under --load-dtype auto: where the script has the flag, train.py's rule
    (fp32 masters for a full fine-tune, a bf16 frozen base for LoRA and QLoRA); elsewhere the script's own default."""
    return DEFAULT_LOAD_DTYPE[method] if script_facts(script).load_dtype_lever else default_load_dtype(script, method)


def liger_kernels(workload) -> bool:
    """Whether Liger's kernels inside the decoder layers are estimated (RMSNorm, SwiGLU, RoPE: smaller saved tensors,
    fused elementwise passes). Every script that turns Liger on gets them: train.py and a loop calling liger's
    `_apply_liger_kernel_to_instance` (full), and the Trainer's `use_liger_kernel` (kernels). TRL's own CLI with
    `--use_liger_kernel` on one H200 (LoRA all-linear, bf16, seq 4096, micro-batch 2, no checkpointing) peaked at
    79.3 GB against 91.2 GB without and ran 11% faster (bench/results/h200-x1-trl-cli-2026-12-01.json)."""
    # "none": the planner never turns it on, but a loop that says it applies Liger (--liger) gets the full kernels
    return bool(workload.liger)


def liger_fused_loss(workload) -> bool:
    """Whether Liger's fused linear cross-entropy is estimated (the loss that never builds the logits): train.py and
    a loop calling `_apply_liger_kernel_to_instance`. The Trainer's `use_liger_kernel` turns it off and keeps TRL's own
    chunked LM-head loss (ScriptFacts.fused_lm_head prices that one)."""
    return liger_kernels(workload) and script_facts(workload.script).liger != "kernels"


def with_script_levers(workload, script: str):
    """`workload` as `script` would run it: the levers it cannot pull dropped (float8 to bf16, a kernel it cannot
    select to SDPA, Liger off where it has no switch), and its own DDP bucket view and LoRA dropout. `check --script`
    judges a config with this, so a train.py config checked for TRL is not credited train.py's levers."""
    from dataclasses import replace

    facts = script_facts(script)
    return replace(
        workload,
        script=script,
        precision=workload.precision if facts.fp8 else "bf16",
        compiled_layers=workload.compiled_layers and facts.fp8,
        # eager: every script loads it (the fallback where the architecture has neither SDPA nor flex)
        attention=workload.attention if workload.attention in (*facts.attentions, "eager") else "sdpa",
        liger=workload.liger and facts.liger != "none",
        grad_as_bucket_view=facts.grad_as_bucket_view,
        lora_dropout=facts.lora_dropout,
    )


def default_lora_targets(script: str) -> tuple[str, ...]:
    return script_facts(script).lora_targets


def parse_lora_targets(text: str) -> tuple[str, ...]:
    """`--lora-targets` value -> short names in layer order: all-linear, qv, or a comma list of q_proj / q / ...
    A ValueError names what is wrong."""
    words = [w.strip() for w in text.replace(" ", ",").split(",") if w.strip()]
    if words == ["all-linear"]:
        return ALL_LINEAR
    if words == ["qv"]:
        return QV
    names = [w.removesuffix("_proj") for w in words]
    unknown = [w for w, n in zip(words, names, strict=True) if n not in ALL_LINEAR]
    if unknown or not names:
        raise ValueError(
            f"--lora-targets {text!r}: {'unknown ' + ', '.join(unknown) if unknown else 'empty'}; use all-linear, "
            "qv or a comma list of q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
        )
    return tuple(t for t in ALL_LINEAR if t in names)


def lora_modules(targets: tuple[str, ...]) -> list[str]:
    """The module names peft matches (q_proj, ...), in layer order."""
    return [f"{t}_proj" for t in targets]
