"""`python -m generator plan`: estimate every strategy, choose one and the GPU ids, print why and the launch command;
with --output write the Accelerate config (never over an existing file without --force). No questions asked."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from generator.catalog.strategies import NAMES as STRATEGY_NAMES
from generator.errors import UserError
from generator.estimate.scripts import SCRIPTS

STRATEGY_CHOICES = ("auto", *STRATEGY_NAMES)


def register(subparsers, verb: str, help_text: str) -> argparse.ArgumentParser:
    from generator.plan.fabrics import FABRICS
    from generator.topology import add_topology_args
    from generator.trial.command import add_trial_args

    p = subparsers.add_parser(verb, help=help_text, description=help_text)
    p.add_argument(
        "--model",
        help="Required. Preset (mistral-7b, llama-3-8b, ...), hub id, local directory, or a config.json-like file "
        "(it sizes the architecture; the launch line then names a placeholder for the checkpoint).",
    )
    add_topology_args(p)
    w = p.add_argument_group("workload")
    w.add_argument("--method", choices=("full", "lora", "qlora"), default="full", help="Fine-tuning method.")
    w.add_argument(
        "--seq-len", type=int, help="Tokens per sequence (default 4096, or the model's positions where it has fewer)."
    )
    w.add_argument(
        "--micro-batch", type=int, help="Sequences per GPU per step (default: largest of 8,4,2,1 that fits)."
    )
    w.add_argument("--global-batch", type=int, help="Sequences per optimizer step over all GPUs (kept fixed).")
    w.add_argument(
        "--grad-checkpointing", choices=("auto", "on", "off"), default="auto", help="Default: off if it fits."
    )
    w.add_argument(
        "--load-dtype",
        choices=("auto", "fp32", "bf16"),
        default="auto",
        help="dtype the weights load in (default auto: what the --script loads in; train.py: fp32 for full, bf16 for "
        "lora/qlora).",
    )
    w.add_argument(
        "--script",
        choices=SCRIPTS,
        default="train.py",
        help="Script the config is launched with: train.py (default), trainer (transformers Trainer / TRL "
        "SFTTrainer defaults) or custom (a plain Accelerate loop: torch AdamW defaults). See README.",
    )
    w.add_argument(
        "--precision",
        choices=("auto", "bf16", "fp8"),
        default="auto",
        help="auto (default): fp8 (float8 Linear layers via torchao, train.py --precision fp8) where it was measured "
        "to pay (DDP, full or LoRA, fp8 tensor cores, torchao installed, predicted faster), else bf16; bf16 opts out; "
        "fp8 forces it (docs/fp8.md).",
    )
    w.add_argument(
        "--compile-layers",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="train.py --compile-layers: each decoder layer compiled in bf16 (float8 compiles them anyway). Default: "
        "chosen by the plan where predicted faster (train.py, full or LoRA, DDP); --no-compile-layers opts out.",
    )
    w.add_argument("--optimizer", choices=("adamw", "adamw8bit"), default="adamw")
    w.add_argument("--lora-r", type=int, default=16, help="LoRA rank for --method lora/qlora (default 16).")
    w.add_argument(
        "--lora-targets",
        help="Projections LoRA adapts: all-linear, qv or a comma list (q_proj,v_proj,...). Default: the script's "
        "(train.py all-linear; trainer and custom qv, TRL's and peft's default).",
    )
    w.add_argument(
        "--script-path",
        help="Your own script for --script trainer (a TRL-CLI-style script; default TRL's trl.scripts.sft) or "
        "--script custom (your Accelerate loop); the launch line runs it.",
    )
    # --- kernels (issue 17) ---
    w.add_argument(
        "--liger",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Liger fused kernels (default: chosen by the plan where liger_kernel is installed).",
    )
    w.add_argument(
        "--attention",
        choices=("auto", "sdpa", "flex", "eager"),
        default="auto",
        help="Attention kernel (default auto: the faster predicted among those the architecture has); flex skips what "
        "packing and the window mask out; eager materialises every score.",
    )
    # --dataset (add_trial_args: the trial's data) also sets --doc-tokens from its examples (bytes/4, approximate).
    w.add_argument(
        "--doc-tokens", type=int, help="Mean tokens per document (default: --dataset's, else they fill each sequence)."
    )
    # --- end kernels ---
    c = p.add_argument_group("choice")
    c.add_argument("--num-gpus", type=int, help="GPUs per machine (default: as many as help).")
    c.add_argument("--strategy", choices=STRATEGY_CHOICES, default="auto", help="Force a strategy (default auto).")
    c.add_argument("--allow-offload", action="store_true", help="Consider ZeRO CPU offload (slow; off by default).")
    c.add_argument("--headroom", type=float, default=0.10, help="Fraction of GPU memory kept free (default 0.10).")
    from generator.ui.parallel_args import add_parallel_args

    add_parallel_args(c)  # --tp-size / --cp-size
    c.add_argument("--bandwidth-file", help='Measured busbw JSON ({"subsets": {"0,1": 365.2}}) from `probe`.')
    c.add_argument(
        "--compute-file",
        help="Operator rates of this GPU from `probe --compute` (default: the shipped "
        "H200 table, scaled by the GPU catalog for other GPUs).",
    )
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


def run(args) -> int:
    from generator.fileio import check_writable
    from generator.trial import command as trial
    from generator.ui.plan_view import DEFAULT_CONFIG

    if args.reset_calibration:
        return trial.reset(args)
    if not args.model:
        raise UserError("--model is required (a preset such as mistral-7b, a hub id or a local directory)")
    if args.output or args.trial:  # fail before any work
        check_writable(args.output or DEFAULT_CONFIG, args.force)
    bandwidth = None
    if args.bandwidth_file:
        from generator.probe.bandwidth_file import load_bandwidth_file

        bandwidth = {frozenset(ids): gbps for ids, gbps in load_bandwidth_file(args.bandwidth_file).items()}
    compute = None
    if args.compute_file:
        from generator.probe.compute_file import load_compute_file

        compute = load_compute_file(args.compute_file)
    from generator.emit import render, write
    from generator.model import load_model
    from generator.plan.engines import default_engines
    from generator.plan.planner import make_plan
    from generator.plan.types import PlanRequest
    from generator.topology import require_known_memory, topology_from_args
    from generator.ui.installed import installed_fields
    from generator.ui.plan_view import plan_to_dict, print_plan
    from generator.ui.request import request_from_args

    topology = topology_from_args(args)
    require_known_memory(topology)
    model = load_model(args.model)
    if args.seq_len is None:  # GPT-2's 1,024 positions: its longest, not a length it cannot run
        args.seq_len = min(PlanRequest.seq_len, model.max_seq_len or PlanRequest.seq_len)
    request = request_from_args(args)
    request = replace(request, **installed_fields())
    if args.trial:
        return trial.run_trial(args, topology, model, request, bandwidth, args.output or DEFAULT_CONFIG)
    engines = trial.calibrated(args, default_engines(compute))
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
