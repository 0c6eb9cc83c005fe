"""`python -m generator check CONFIG.yaml`: lint an Accelerate config against accelerate 1.15, this machine, the model.

Exit code: 0 clean (notes only), 1 warnings only, 2 errors (with --fix: of the corrected config)."""

from __future__ import annotations

import argparse

from generator.errors import UserError
from generator.estimate.scripts import SCRIPTS


def register(subparsers, verb: str, help_text: str) -> argparse.ArgumentParser:
    p = subparsers.add_parser(verb, help=help_text, description=help_text + " Exit code 0 clean, 1 warnings, 2 errors.")
    p.add_argument("config", help="Accelerate config YAML to check (- reads standard input).")
    p.add_argument("--model", help="Model preset, hub id or local path: enables the memory check.")
    from generator.topology import add_topology_args

    add_topology_args(p)
    # Workload flags default to the generator's header when the config has one, else to 4096 / 1 / full.
    p.add_argument("--seq-len", type=int, help="Sequence length for the memory check (default 4096).")
    p.add_argument("--micro-batch", type=int, help="Sequences per GPU per step (default 1).")
    p.add_argument("--method", choices=("full", "lora", "qlora"), help="Fine-tuning method (default full).")
    p.add_argument(
        "--grad-checkpointing",
        choices=("on", "off"),
        help="Activation checkpointing of every decoder layer in the memory check (default on).",
    )
    p.add_argument(
        "--script",
        choices=SCRIPTS,
        default="custom",
        help="Script the config is launched with (default custom: a plain Accelerate loop, since check cannot see "
        "it); train.py or trainer (transformers Trainer / TRL SFTTrainer).",
    )
    p.add_argument(
        "--precision",
        choices=("bf16", "fp8"),
        help="Precision train.py runs in for the memory and speed checks (default: the header's launch command, "
        "else bf16; docs/fp8.md).",
    )
    p.add_argument(
        "--lora-targets", help="LoRA's adapted projections: all-linear, qv or a comma list (default: the header's)."
    )
    p.add_argument("--fix", action="store_true", help="Write a corrected config to --output.")
    p.add_argument("--output", help="Where --fix writes the corrected config.")
    p.add_argument("--force", action="store_true", help="Let --fix overwrite an existing --output.")
    p.add_argument("--json", action="store_true", help="Print findings as JSON.")
    return p


def _topology(args):
    """The machine to check against: the named one, else this machine when it can be read, else None."""
    from generator.topology import topology_from_args

    explicit = getattr(args, "topo_file", None) or getattr(args, "machine", None)
    try:
        return topology_from_args(args)
    except UserError:
        if explicit:
            raise
        return None


def _workloads(args, header):
    """(the workload under --script, the header's workload under its own script or None). Explicit flags win over
    the header; a script other than the header's brings its own load dtype and DDP bucket view."""
    from dataclasses import replace

    from generator.estimate.scripts import default_load_dtype, with_script_levers
    from generator.estimate.types import Workload

    if any(v is not None and v <= 0 for v in (args.seq_len, args.micro_batch)):
        raise UserError("--seq-len and --micro-batch must be positive integers")
    from generator.estimate.scripts import script_facts

    if getattr(args, "precision", None) == "fp8" and not script_facts(args.script).fp8:
        raise UserError(f"--precision fp8 does not apply to --script {args.script}: only train.py has a float8 path")
    planned = header[1] if header else None
    base = planned or Workload(seq_len=4096, micro_batch=1, method="full")
    given = _given(args)
    base = replace(base, **given)
    same = planned is not None and planned.script == args.script
    checked = replace(
        with_script_levers(base, args.script),
        load_dtype=base.load_dtype if same else default_load_dtype(args.script, base.method),
    )
    return checked, (replace(planned, **given) if planned else None)


def _given(args) -> dict:
    """The workload fields set by flags, as Workload field names."""
    from generator.ui.request import lora_targets_flag

    ckpt = None if args.grad_checkpointing is None else args.grad_checkpointing == "on"
    given = {
        "seq_len": args.seq_len,
        "micro_batch": args.micro_batch,
        "method": args.method,
        "grad_checkpointing": ckpt,
        "precision": getattr(args, "precision", None),
        "lora_targets": lora_targets_flag(getattr(args, "lora_targets", None)),
    }
    return {k: v for k, v in given.items() if v is not None}


def assumed_line(ctx, args) -> str:
    """One line saying which workload the memory and speed checks used and where it came from."""
    w = ctx.workload
    source = "from the config's header" if ctx.written_for is not None else "defaults"
    flags = [f"--{k.replace('_', '-')}" for k in _given(args)]
    if flags:
        source += f", {', '.join(flags)} from the command line"
    return (
        f"assumed ({source}): {ctx.model.name}, method {w.method}, seq {w.seq_len}, micro-batch {w.micro_batch}, "
        f"checkpointing {'on' if w.grad_checkpointing else 'off'}, --script {w.script}"
        + (" --precision fp8" if w.precision == "fp8" else "")
    )


def _context(args, duplicates, text: str | None = None):
    from generator.check.types import CheckContext
    from generator.check.written_for import written_for

    header = written_for(text) if text else None
    workload, planned = _workloads(args, header)
    model = None
    if args.model or header:
        from generator.estimate.scripts import compiles_layers
        from generator.model import load_model

        scripts = {workload.script} | ({planned.script} if planned else set())
        model = load_model(args.model or header[0], compiled=any(map(compiles_layers, scripts)))
    exclude = tuple(getattr(args, "exclude", ()) or ())
    return CheckContext(
        topo=_topology(args),
        model=model,
        workload=workload,
        duplicate_keys=duplicates,
        exclude=exclude,
        written_for=planned,
    )


def _config_text(path: str) -> str | None:
    """The config's text for its header (None for standard input, already consumed by the loader)."""
    from generator.fileio import read_text

    return None if path == "-" else read_text(path, "config")


def run(args) -> int:
    from generator.check import exit_code, load_config, run_rules
    from generator.check.report import print_findings, render_json
    from generator.check.types import Finding

    if args.fix and not args.output:
        raise UserError("--fix needs --output NEW.yaml (the original config is never modified)")
    if args.output and not args.fix:
        raise UserError("--output is only used with --fix")
    if args.fix:
        from generator.fileio import check_writable

        check_writable(args.output, args.force)
    cfg, duplicates = load_config(args.config)
    ctx = _context(args, duplicates, _config_text(args.config))
    findings = run_rules(cfg, ctx)
    if ctx.topo is not None:
        fix = "pass --topo-file or --machine to describe the machine the job runs on."
        findings += [Finding("info", "topology", w, fix, "context") for w in ctx.topo.warnings]
    if ctx.topo is None:
        findings.append(
            Finding(
                "info",
                "topology",
                "no topology read (no GPUs visible and no --topo-file / --machine): wiring checks skipped.",
                "pass --topo-file or --machine.",
                "context",
            )
        )
    if ctx.model is not None and ctx.topo is None:
        findings.append(
            Finding(
                "info",
                "model",
                "memory check needs the GPU size: skipped without a topology.",
                "pass --topo-file or --machine.",
                "context",
            )
        )
    fixed_path = None
    if args.fix:
        from generator.check.fix import changes, dump_config, fix_config
        from generator.fileio import atomic_write

        fixed, applied = fix_config(cfg, ctx)
        changed = changes(cfg, fixed, applied)
        remaining = run_rules(fixed, ctx)
        header = f"# Corrected by `python -m generator check --fix` from {args.config}\n"
        fixed_path = str(atomic_write(args.output, header + dump_config(fixed), force=args.force))
    assumed = assumed_line(ctx, args) if ctx.model is not None else None
    if args.json:
        print(
            render_json(args.config, findings, fixed_path, assumed, [c.line() for c in changed] if args.fix else None)
        )
    else:
        if assumed:
            print(assumed)
        print_findings(findings, args.config)
        if args.fix:
            left = [f for f in remaining if f.severity != "info"]
            print(f"wrote {fixed_path}: {len(changed)} key(s) changed; {len(left)} finding(s) need a human")
            for c in changed:
                print("  " + c.line())
            for f in left:
                print("  " + f.line())
    return exit_code(remaining) if args.fix else exit_code(findings)
