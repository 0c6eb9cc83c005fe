"""`python -m generator plan`: estimate every strategy, choose one and the GPU ids, print why and the launch command;
with --output write the Accelerate config (never over an existing file without --force). No questions asked."""

from __future__ import annotations

import argparse
import json
import sys

from generator.catalog.strategies import NAMES as STRATEGY_NAMES
from generator.errors import UserError

DEFAULT_CONFIG = "accelerate_config.yaml"
"""Path the printed launch command names when no --output is given (nothing is written then)."""
STRATEGY_CHOICES = ("auto", *STRATEGY_NAMES)


def register(subparsers, verb: str, help_text: str) -> argparse.ArgumentParser:
    from generator.plan.fabrics import FABRICS
    from generator.topology import add_topology_args
    from generator.trial.command import add_trial_args

    p = subparsers.add_parser(verb, help=help_text, description=help_text)
    p.add_argument("--model", help="Required. Preset (mistral-7b, llama-3-8b, ...), hub id or local directory.")
    add_topology_args(p)
    w = p.add_argument_group("workload")
    w.add_argument("--method", choices=("full", "lora", "qlora"), default="full", help="Fine-tuning method.")
    w.add_argument("--seq-len", type=int, default=4096, help="Tokens per sequence (default 4096).")
    w.add_argument(
        "--micro-batch", type=int, help="Sequences per GPU per step (default: largest of 8,4,2,1 that fits)."
    )
    w.add_argument("--global-batch", type=int, help="Sequences per optimizer step over all GPUs (kept fixed).")
    w.add_argument(
        "--grad-checkpointing", choices=("auto", "on", "off"), default="auto", help="Default: off if it fits."
    )
    w.add_argument("--load-dtype", choices=("fp32", "bf16"), default="fp32", help="dtype the weights load in.")
    w.add_argument("--optimizer", choices=("adamw", "adamw8bit"), default="adamw")
    w.add_argument("--lora-r", type=int, default=16, help="LoRA rank for --method lora/qlora (default 16).")
    w.add_argument("--liger", action="store_true", help="Liger fused kernels (no full logits tensor).")
    w.add_argument(
        "--attention",
        choices=("sdpa", "flex"),
        default="sdpa",
        help="Attention kernel: flex skips what packing masks out (GPU; faster the shorter the documents).",
    )
    w.add_argument("--doc-tokens", type=int, help="Mean tokens per packed document, for --attention flex.")
    c = p.add_argument_group("choice")
    c.add_argument("--num-gpus", type=int, help="GPUs per machine (default: as many as help).")
    c.add_argument("--strategy", choices=STRATEGY_CHOICES, default="auto", help="Force a strategy (default auto).")
    c.add_argument("--allow-offload", action="store_true", help="Consider ZeRO CPU offload (slow; off by default).")
    c.add_argument("--headroom", type=float, default=0.10, help="Fraction of GPU memory kept free (default 0.10).")
    c.add_argument("--bandwidth-file", help='Measured busbw JSON ({"subsets": {"0,1": 365.2}}) from `probe`.')
    m = p.add_argument_group("multi-node")
    m.add_argument("--num-machines", type=int, default=1)
    m.add_argument("--machine-rank", type=int, default=0)
    m.add_argument("--main-process-ip", help="Machine 0's private address (the rendezvous store has no auth).")
    m.add_argument("--main-process-port", type=int, default=29500)
    m.add_argument("--inter-node-gbps", type=float, help="Measured all-reduce busbw between machines, GB/s.")
    m.add_argument("--fabric", choices=tuple(FABRICS), help="Predict inter-node bandwidth for a named fabric.")
    o = p.add_argument_group("output")
    o.add_argument("--output", help="Write the Accelerate config here (plus a DeepSpeed JSON beside it if needed).")
    o.add_argument("--force", action="store_true", help="Overwrite --output; write a forced strategy that won't fit.")
    o.add_argument("--json", action="store_true", help="Print one JSON object instead of the table.")
    add_trial_args(p)
    return p


def request_from_args(args):
    from generator.plan.types import PlanRequest

    return PlanRequest(
        method=args.method,
        seq_len=args.seq_len,
        micro_batch=args.micro_batch,
        global_batch=args.global_batch,
        num_gpus=args.num_gpus,
        exclude=_exclude(getattr(args, "exclude", None)),
        strategy=args.strategy,
        grad_checkpointing=args.grad_checkpointing,
        allow_offload=args.allow_offload,
        headroom=args.headroom,
        load_dtype=args.load_dtype,
        optimizer=args.optimizer,
        lora_r=args.lora_r,
        liger=args.liger,
        attention=args.attention,
        doc_tokens=args.doc_tokens,
        num_machines=args.num_machines,
        machine_rank=args.machine_rank,
        main_process_ip=args.main_process_ip,
        main_process_port=args.main_process_port,
        inter_node_gbps=args.inter_node_gbps,
        fabric=args.fabric,
    )


def _exclude(value) -> tuple[int, ...]:
    """--exclude as the topology helpers parse it (a list of ints) or as raw text ("0,3")."""
    if not value:
        return ()
    if isinstance(value, str):
        value = value.replace(" ", ",").split(",")
    try:
        return tuple(sorted({int(v) for v in value if str(v).strip() != ""}))
    except ValueError:
        raise UserError(f"--exclude takes GPU indices such as 0,3; got {value!r}") from None


def run(args) -> int:
    from generator.fileio import check_writable
    from generator.trial import command as trial

    if args.reset_calibration:
        return trial.reset(args)
    if not args.model:
        raise UserError("--model is required (a preset such as mistral-7b, a hub id or a local directory)")
    if args.output or args.trial:  # fail before any work
        check_writable(args.output or DEFAULT_CONFIG, args.force)
    bandwidth = None
    if args.bandwidth_file:
        from generator.plan.bandwidth_file import load_bandwidth_file

        bandwidth = load_bandwidth_file(args.bandwidth_file)
    from generator.emit import render, write
    from generator.model import load_model
    from generator.plan.engines import default_engines
    from generator.plan.planner import make_plan
    from generator.topology import topology_from_args

    topology = topology_from_args(args)
    model, request = load_model(args.model), request_from_args(args)
    if args.trial:
        return trial.run_trial(args, topology, model, request, bandwidth, args.output or DEFAULT_CONFIG)
    engines = trial.calibrated(args, default_engines())
    plan = make_plan(topology, model, request, bandwidth=bandwidth, engines=engines)
    emitted = render(plan, args.output or DEFAULT_CONFIG)
    written = None
    if args.output and not (plan.forced and not args.force):
        written = write(emitted, force=args.force)
    if args.json:
        print(json.dumps(plan_to_dict(plan, emitted.launch_command, args.output if written else None), indent=2))
    else:
        print_plan(plan, emitted.launch_command, [str(p) for p in written or ()])
    if args.output and written is None:
        why = next(w for w in plan.warnings if w.startswith("--strategy"))
        raise UserError(f"not written: {why}; pass --force to write it anyway")
    return 0


def plan_to_dict(plan, launch_command: str, config_path: str | None) -> dict:
    from generator.estimate.table import estimate_to_dict

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
        "chosen": estimate_to_dict(plan.estimate),
        "forced": plan.forced,
        "reasons": list(plan.reasons),
        "warnings": list(plan.warnings),
        "config_path": config_path,
        "launch_command": launch_command,
    }


def print_plan(plan, launch_command: str, written: list[str], console=None) -> None:
    from rich.console import Console
    from rich.markup import escape

    from generator.estimate.table import render_estimates
    from generator.plan.reasons import format_ids

    console = console or Console(file=sys.stdout)
    w = plan.workload
    title = f"{plan.model.name}, {w.method} fine-tune, seq {w.seq_len}, {plan.num_processes}x {plan.gpu_name}"
    console.print(render_estimates(list(plan.estimates), title, highlight=plan.strategy))
    ckpt = "on" if w.grad_checkpointing else "off"
    console.print(
        f"[bold]Plan:[/] {plan.strategy} on GPUs {format_ids(plan.gpu_ids)} ({plan.num_processes} processes), "
        f"micro-batch {w.micro_batch} x accumulation {w.grad_accum} = global batch {plan.global_batch}, "
        f"activation checkpointing {ckpt}"
    )
    for reason in plan.reasons:
        console.print(f"  - {escape(reason)}")
    for warning in plan.warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}")
    if not launch_command:  # the wizard prints the command after writing
        return
    if written:
        console.print(f"[green]wrote[/] {escape(', '.join(written))}")
    else:
        console.print(f"(nothing written; add --output PATH to write {DEFAULT_CONFIG})")
    console.print("[bold]Launch:[/]")
    console.print(escape(launch_command), soft_wrap=True, highlight=False)
