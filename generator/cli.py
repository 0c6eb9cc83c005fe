"""`python -m generator [VERB]`: one module per verb under generator/commands, as accelerate's own CLI does."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
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


class UsageError(UserError):
    """A flag argparse rejects; raised instead of argparse's usage dump so every verb reports mistakes the same way."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is one `error:` line (and a JSON object under --json) like every other mistake."""

    def error(self, message: str):
        raise UsageError(f"{message}; see `{self.prog} --help`")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(
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


class _Stderr(logging.StreamHandler):
    """A handler on whatever sys.stderr is when a note is written (a test's capture, a redirect made after start)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def _notes_to_stderr() -> None:
    """The generator's own progress notes (logger "generator", INFO: a wait the user should know about) as plain
    lines on stderr, so stdout stays the plan, or the JSON under --json."""
    logger = logging.getLogger("generator")
    if not logger.handlers:
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _notes_to_stderr()
    verb = argv[0] if argv and argv[0] in VERBS else None
    if verb is None and not argv:
        verb, argv = "wizard", ["wizard"]
    parser = build_parser(only=verb)
    as_json = "--json" in argv  # known before parsing, so a flag argparse rejects is reported as JSON too
    try:
        args = parser.parse_args(argv)
        if args.verb is None:
            parser.print_help()
            return 2
        module = importlib.import_module(f"generator.commands.{args.verb}")
        return int(module.run(args) or 0)
    except UserError as exc:
        return _report(str(exc), exc.exit_code, as_json)
    except EOFError:
        return _report("input ended before the questions were answered; use `plan` with flags in scripts", 2, as_json)
    except KeyboardInterrupt:
        print("interrupted: nothing was written", file=sys.stderr)
        return 130


def _report(message: str, code: int, as_json: bool) -> int:
    """One line on stderr; under --json also one object on stdout, so a script reading stdout can parse the failure."""
    print(f"error: {message}", file=sys.stderr)
    if as_json:
        print(json.dumps({"error": message, "exit_code": code}))
    return code
