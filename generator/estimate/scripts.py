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
    fused_lm_head: bool
    """The loss never builds the [tokens, vocab] logits: TRL's chunked fused LM head (sft_trainer.py 1142-1147,
    trl/trainer/utils.py 1548-1700) computes log-probs tile by tile. Otherwise transformers' ForCausalLMLoss keeps
    bf16 logits and their fp32 upcast (loss_utils.py 61)."""


FACTS: dict[str, ScriptFacts] = {
    "train.py": ScriptFacts(
        name="train.py",
        summary="train.py: fused AdamW, DDP gradient_as_bucket_view on, fp32 load by default",
        adamw="fused",
        weight_decay=False,
        grad_as_bucket_view=True,
        load_dtype="fp32",
        fused_lm_head=False,
    ),
    "trainer": ScriptFacts(
        name="trainer",
        summary="transformers Trainer / TRL SFTTrainer: fused AdamW (adamw_torch_fused), DDP bucket view off, "
        "fp32 load (TRL), TRL's chunked LM-head loss",
        adamw="fused",
        weight_decay=False,
        grad_as_bucket_view=False,
        load_dtype="fp32",
        fused_lm_head=True,
    ),
    "custom": ScriptFacts(
        name="custom",
        summary="plain Accelerate loop: torch.optim.AdamW defaults (foreach), DDP bucket view off, bf16 load "
        "(from_pretrained's checkpoint dtype)",
        adamw="foreach",
        weight_decay=True,
        grad_as_bucket_view=False,
        load_dtype="bf16",
        fused_lm_head=False,
    ),
}


def script_facts(name: str) -> ScriptFacts:
    """The facts of `name` (one of SCRIPTS); a ValueError names the choices otherwise."""
    try:
        return FACTS[name]
    except KeyError:
        raise ValueError(f"unknown script '{name}' (one of {', '.join(SCRIPTS)})") from None


def default_load_dtype(script: str, method: str) -> str:
    """What a script loads the weights in when the user does not say (--load-dtype auto): train.py resolves it per
    method (fp32 masters for full, a bf16 frozen base under fp32 adapters: training/args.py), the others load what
    their library loads whatever the method (ScriptFacts.load_dtype)."""
    return DEFAULT_LOAD_DTYPE[method] if script == "train.py" else script_facts(script).load_dtype
