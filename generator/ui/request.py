"""The plan request the `plan` flags describe: argparse namespace -> PlanRequest (also what docsgen's recipes build,
so a recipe's printed command and its files come from the same parse)."""

from __future__ import annotations

import argparse

from generator.errors import UserError
from generator.estimate.scripts import parse_lora_targets
from generator.plan.types import PlanRequest
from generator.ui.dataset import mean_example_tokens
from generator.ui.parallel_args import parallel_fields


def request_from_args(args: argparse.Namespace) -> PlanRequest:
    """Every planning flag of `plan`; --exclude arrives parsed by topology.parse_gpu_list (add_topology_args)."""
    return PlanRequest(
        method=args.method,
        seq_len=PlanRequest.seq_len if args.seq_len is None else args.seq_len,  # plan resolves None per model
        micro_batch=args.micro_batch,
        global_batch=args.global_batch,
        num_gpus=args.num_gpus,
        exclude=tuple(getattr(args, "exclude", ()) or ()),
        strategy=args.strategy,
        grad_checkpointing=args.grad_checkpointing,
        allow_offload=args.allow_offload,
        headroom=args.headroom,
        load_dtype=args.load_dtype or "auto",
        optimizer=args.optimizer,
        lora_r=args.lora_r,
        lora_targets=lora_targets_flag(getattr(args, "lora_targets", None)),
        # --- kernels (issue 17) ---
        liger=args.liger,
        attention=args.attention,
        doc_tokens=_doc_tokens(args),
        # --- end kernels ---
        num_machines=args.num_machines,
        machine_rank=args.machine_rank,
        main_process_ip=args.main_process_ip,
        main_process_port=args.main_process_port,
        inter_node_gbps=args.inter_node_gbps,
        fabric=args.fabric,
        script=getattr(args, "script", None) or "train.py",
        script_path=getattr(args, "script_path", None),
        precision=getattr(args, "precision", None) or "auto",
        compile_layers=getattr(args, "compile_layers", None),
        **parallel_fields(args),  # --tp-size / --cp-size (ui/parallel_args.py)
    )


def lora_targets_flag(text: str | None) -> tuple[str, ...] | None:
    """--lora-targets parsed (None: the script's default); a bad list is one line."""
    if not text:
        return None
    try:
        return parse_lora_targets(text)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _doc_tokens(args: argparse.Namespace) -> int | None:
    """--doc-tokens, else the mean example length of --dataset (approximate), else None (documents fill sequences)."""
    if args.doc_tokens is not None or not getattr(args, "dataset", None):
        return args.doc_tokens
    return mean_example_tokens(args.dataset)
