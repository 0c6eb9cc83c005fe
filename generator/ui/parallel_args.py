"""`plan --tp-size N --cp-size N`: force tensor / context parallel group sizes (the planner chooses them otherwise)."""

from __future__ import annotations

import argparse


def add_parallel_args(group) -> None:
    group.add_argument(
        "--tp-size", type=int, help="Force the tensor-parallel group size (FSDP2; default: the planner chooses)."
    )
    group.add_argument(
        "--cp-size", type=int, help="Force the context-parallel group size (FSDP2; default: the planner chooses)."
    )


def parallel_fields(args: argparse.Namespace) -> dict:
    """PlanRequest fields from the flags (absent on parsers that do not add them, e.g. check's)."""
    return {"tp_size": getattr(args, "tp_size", None), "cp_size": getattr(args, "cp_size", None)}
