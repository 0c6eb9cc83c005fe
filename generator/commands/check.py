"""`python -m generator check CONFIG.yaml`: lint an Accelerate config against accelerate 1.15, this machine, the model.

Exit code: 0 clean (notes only), 1 warnings only, 2 errors (with --fix: of the corrected config)."""

from __future__ import annotations

import argparse

from generator.errors import UserError


def register(subparsers, verb: str, help_text: str) -> argparse.ArgumentParser:
    p = subparsers.add_parser(verb, help=help_text, description=help_text + " Exit code 0 clean, 1 warnings, 2 errors.")
    p.add_argument("config", help="Accelerate config YAML to check (- reads standard input).")
    p.add_argument("--model", help="Model preset, hub id or local path: enables the memory check.")
    from generator.topology import add_topology_args

    add_topology_args(p)
    p.add_argument("--seq-len", type=int, default=4096, help="Sequence length for the memory check (default 4096).")
    p.add_argument("--micro-batch", type=int, default=1, help="Sequences per GPU per step (default 1).")
    p.add_argument("--method", choices=("full", "lora", "qlora"), default="full", help="Fine-tuning method.")
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


def _context(args, duplicates):
    from generator.check.types import CheckContext
    from generator.estimate.types import Workload

    if args.seq_len <= 0 or args.micro_batch <= 0:
        raise UserError("--seq-len and --micro-batch must be positive integers")
    model = None
    if args.model:
        from generator.model import load_model

        model = load_model(args.model)
    workload = Workload(method=args.method, seq_len=args.seq_len, micro_batch=args.micro_batch)
    exclude = tuple(getattr(args, "exclude", ()) or ())
    return CheckContext(
        topo=_topology(args), model=model, workload=workload, duplicate_keys=duplicates, exclude=exclude
    )


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
    ctx = _context(args, duplicates)
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
    if args.model and ctx.topo is None:
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
        from generator.check.fix import dump_config, fix_config
        from generator.fileio import atomic_write

        fixed, applied = fix_config(cfg, ctx)
        remaining = run_rules(fixed, ctx)
        header = f"# Corrected by `python -m generator check --fix` from {args.config}\n"
        fixed_path = str(atomic_write(args.output, header + dump_config(fixed), force=args.force))
    if args.json:
        print(render_json(args.config, findings, fixed_path))
    else:
        print_findings(findings, args.config)
        if args.fix:
            left = [f for f in remaining if f.severity != "info"]
            print(f"wrote {fixed_path}: applied {len(applied)} fix(es); {len(left)} finding(s) need a human")
            for f in left:
                print("  " + f.line())
    return exit_code(remaining) if args.fix else exit_code(findings)
