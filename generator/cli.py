"""`python -m generator [VERB]`: one module per verb under generator/commands, as accelerate's own CLI does."""

from __future__ import annotations

import argparse
import importlib
import sys

from generator import __version__
from generator.errors import UserError

# Verb -> module under generator.commands. Each module defines `register(subparsers)` and `run(args) -> int`.
# Modules are imported lazily so `topo --help` never pays for another verb's imports.
VERBS = {
    "topo": "Show how the GPUs are wired: link matrix, NVLink islands, best subset.",
    "plan": "Estimate every strategy, choose one and the GPU ids, write the Accelerate config.",
    "check": "Lint an existing Accelerate config against this machine and the model.",
    "probe": "Measure the all-reduce bandwidth of the GPU subsets that matter.",
    "wizard": "Answer a few questions, get a config (the default with no verb).",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m generator",
        description="Choose DDP / FSDP / DeepSpeed ZeRO and the GPU ids for this machine's wiring.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb, help_text in VERBS.items():
        if only is not None and verb != only:
            sub.add_parser(verb, help=help_text, add_help=False)
            continue
        module = importlib.import_module(f"generator.commands.{verb}")
        module.register(sub, verb, help_text)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verb = argv[0] if argv and argv[0] in VERBS else None
    if verb is None and not argv:
        verb, argv = "wizard", ["wizard"]
    parser = build_parser(only=verb)
    args = parser.parse_args(argv)
    if args.verb is None:
        parser.print_help()
        return 2
    module = importlib.import_module(f"generator.commands.{args.verb}")
    try:
        return int(module.run(args) or 0)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except EOFError:
        msg = "input ended before the questions were answered; use `plan` with flags in scripts"
        print(f"error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: nothing was written", file=sys.stderr)
        return 130
