"""`python -m generator` (or `wizard`): answer a few questions, get an Accelerate config and its launch command."""

from __future__ import annotations

import argparse


def register(subparsers, verb: str, help_text: str) -> argparse.ArgumentParser:
    return subparsers.add_parser(verb, help=help_text, description=help_text + " Ctrl-C at any point writes nothing.")


def run(args) -> int:
    from generator.wizard.flow import run_wizard

    return run_wizard()
