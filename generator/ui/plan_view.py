"""A plan shown to a person (a rich table, the choice and its reasons, the launch command) or to a program (one
JSON-ready dict): what `plan`, `plan --trial` and the wizard print."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape

from generator.emit.script_cli import loop_settings
from generator.plan.reasons import format_ids
from generator.plan.types import Plan
from generator.ui.estimates import estimate_to_dict, render_estimates

PIPE_WIDTH = 200
"""Columns when stdout is not a terminal: the widest plan table (breakdowns, offload rows) fits on one line."""
DEFAULT_CONFIG = "accelerate_config.yaml"
"""Path the printed launch command names when no --output is given (nothing is written then)."""


def plan_to_dict(plan: Plan, launch_command: str, config_path: str | None) -> dict:
    w = plan.workload
    return {
        "model": plan.model.name,
        "machine": plan.machine,
        "method": w.method,
        "seq_len": w.seq_len,
        "estimates": [estimate_to_dict(e) for e in plan.estimates],
        "strategy": plan.strategy,
        "gpu_ids": list(plan.gpu_ids),
        "num_processes": plan.num_processes,
        "num_machines": plan.num_machines,
        "micro_batch": w.micro_batch,
        "gradient_accumulation_steps": w.grad_accum,
        "global_batch": plan.global_batch,
        "grad_checkpointing": w.grad_checkpointing,
        "hsdp": {"replicate": plan.hsdp_replicate, "shard": plan.hsdp_shard} if plan.strategy == "hsdp" else None,
        "parallel": _parallel_dict(plan),
        "chosen": estimate_to_dict(plan.estimate),
        "forced": plan.forced,
        "reasons": list(plan.reasons),
        "levers": list(plan.levers),
        "warnings": list(plan.warnings),
        "usable_memory": plan.usable_memory,
        "config_path": config_path,
        "launch_command": launch_command,
        "script": w.script,
        "loop_settings": loop_settings(plan),
    }


def _layout(plan: Plan) -> str:
    return f" ({plan.parallel.layout.label}, predicted)" if plan.parallel else ""


def _parallel_dict(plan: Plan) -> dict | None:
    """Tensor/context-parallel groups (None for data parallelism only)."""
    if plan.parallel is None:
        return None
    lay = plan.parallel.layout
    return {
        "tp": lay.tp, "cp": lay.cp, "dp_shard": lay.dp_shard, "dp_replicate": lay.dp_replicate,
        "tp_groups": [list(g) for g in plan.parallel.tp_groups],
        "cp_groups": [list(g) for g in plan.parallel.cp_groups],
    }  # fmt: skip


def print_plan(plan: Plan, launch_command: str, written: list[str], console=None) -> None:
    # Not a terminal (make demo, a pipe, a log): rich would cut the table to 80 columns; print it at full width.
    console = console or Console(file=sys.stdout, width=None if sys.stdout.isatty() else PIPE_WIDTH)
    for warning in plan.warnings:  # first: a reference-machine fallback must be read before the table it explains
        console.print(f"[yellow]warning:[/] {escape(warning)}")
    w = plan.workload
    ckpt = "on" if w.grad_checkpointing else "off"
    # Every row is at the plan's batch setting: say which, so a number quoted from another setting is not looked for.
    title = (
        f"{plan.model.name}, {w.method} fine-tune, seq {w.seq_len}, {plan.num_processes}x {plan.gpu_name}, "
        f"micro-batch {w.micro_batch}, checkpointing {ckpt}"
    )
    console.print(render_estimates(list(plan.estimates), title, highlight=plan.strategy))
    console.print(
        f"[bold]Plan:[/] {plan.strategy}{_layout(plan)} on GPUs {format_ids(plan.gpu_ids)} ({plan.num_processes} "
        "processes), "
        f"micro-batch {w.micro_batch} x accumulation {w.grad_accum} = global batch {plan.global_batch}, "
        f"activation checkpointing {ckpt}"
    )
    for reason in (*plan.reasons, *plan.levers):
        console.print(f"  - {escape(reason)}")
    if plan.usable_memory:
        console.print(f"  - usable per GPU: {plan.estimate.capacity_gb:.1f} GB = {escape(plan.usable_memory)}")
    if not launch_command:  # the wizard prints the command after writing
        return
    if written:
        console.print(f"[green]wrote[/] {escape(', '.join(written))}")
    else:
        console.print(f"(nothing written; add --output PATH to write {DEFAULT_CONFIG})")
    console.print("[bold]Launch:[/]")
    console.print(escape(launch_command), soft_wrap=True, highlight=False)
    settings = loop_settings(plan)
    if settings:
        console.print("[bold]Your loop must use[/] (for these predictions to hold):")
        for line in settings:
            console.print(f"  - {escape(line)}")
