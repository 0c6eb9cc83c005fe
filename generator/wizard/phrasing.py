"""The planner's advice in the wizard's words: the planner names `plan`'s command-line flags ("--allow-offload to
consider it", "written only with --force"), which a wizard user never types. Each flag is rewritten as the wizard
question or menu choice that sets it; the planner's text, and so what `plan` prints and writes, stays as it is."""

from __future__ import annotations

import re
from dataclasses import replace

from generator.plan.types import Plan

REVIEW_MENU = "'What now?'"
"""The review menu's question, where the wizard's overrides live."""

WIZARD_WORDS: tuple[tuple[str, str], ...] = (
    # Whole phrases first: their fix is a menu choice, not a value.
    (r"\(--allow-offload to consider it\)", f"(choose 'Allow ZeRO CPU offload' at {REVIEW_MENU} to consider it)"),
    (r"\(written only with --force\)", "(written only if you answer yes to 'Write it anyway?')"),
    (r"run without --strategy to see it", "pick 'auto' under 'Choose another strategy' to see it"),
    (r"use --strategy auto", "choose 'auto (the planner's pick)' as the strategy"),
    (r"--strategy auto would pick", "the planner's pick (auto) would be"),
    (r"exclude fewer with --exclude", f"keep at least one under 'Choose which GPUs' at {REVIEW_MENU}"),
    (r"lower --num-gpus", f"choose fewer under 'Choose the number of GPUs' at {REVIEW_MENU}"),
    (r"or a --num-gpus that divides it", "or a number of GPUs that divides it"),
    (r"--doc-tokens N or --dataset FILE refines it", "the 'Mean tokens per training example' answer refines it"),
    (
        r"pass --inter-node-gbps with a measured all-reduce busbw, or --fabric \S+",
        "answer 'Network between machines?' with your fabric or 'I measured it'",
    ),
    (r"with no --global-batch", "with global batch 'auto'"),
    (r"--main-process-ip not set", "machine 0's private IP address not set"),
    (
        r"pass --model-dir DIR, a directory with config.json and the tokenizer",
        "answer 'Model' with a local directory that has config.json and the tokenizer",
    ),
    (r"--trial: ", ""),
    # Single flags with a value: the question that sets it, in its own words.
    (r"--method (lora|qlora)", lambda m: {"lora": "LoRA", "qlora": "QLoRA"}[m[1]]),
    (r"--allow-offload", "ZeRO CPU offload"),
    (r"--seq-len (\d+)", r"sequence length \1"),
    (r"--global-batch (\d+) or (\d+)", r"global batch \1 or \2"),
    (r"--global-batch (\d+)", r"global batch \1"),
    (r"--micro-batch", "micro-batch"),
    (r"--num-gpus (\d+)", r"\1 GPUs"),
    (r"--num-machines (\d+)", r"\1 machines"),
    (r"--strategy (\S+)", r"strategy \1"),
    (r"--attention (\S+)", r"attention \1"),
    (r"--load-dtype (\S+)", r"loading the weights in \1"),
    (r"--precision (\S+)", r"precision \1 (the 'Precision?' question, asked for full and LoRA on fp8 GPUs)"),
    (r"--fabric (\S+)", r"network \1"),
    (r"--inter-node-gbps", "the measured bandwidth between machines"),
    # Whatever is left (a flag added later): its name in words, never a flag the wizard cannot take.
    (r"(?<![\w-])--([a-z][a-z-]*)", lambda m: m[1].replace("-", " ")),
)


def in_wizard_words(text: str) -> str:
    """`text` with every command-line flag rewritten as the wizard's question or choice."""
    for pattern, words in WIZARD_WORDS:
        text = re.sub(pattern, words, text)
    return text


def plan_in_wizard_words(plan: Plan) -> Plan:
    """The plan to show: its reasons and warnings in the wizard's words (what gets written is the plan itself)."""
    return replace(
        plan,
        reasons=tuple(in_wizard_words(r) for r in plan.reasons),
        warnings=tuple(in_wizard_words(w) for w in plan.warnings),
        levers=tuple(in_wizard_words(lv) for lv in plan.levers),
    )
