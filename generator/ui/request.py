"""The plan request the `plan` flags describe: argparse namespace -> PlanRequest (also what docsgen's recipes build,
so a recipe's printed command and its files come from the same parse)."""

from __future__ import annotations

import argparse

from generator.plan.types import PlanRequest


def request_from_args(args: argparse.Namespace) -> PlanRequest:
    """Every planning flag of `plan`; --exclude arrives parsed by topology.parse_gpu_list (add_topology_args)."""
    return PlanRequest(
        method=args.method,
        seq_len=args.seq_len,
        micro_batch=args.micro_batch,
        global_batch=args.global_batch,
        num_gpus=args.num_gpus,
        exclude=tuple(getattr(args, "exclude", ()) or ()),
        strategy=args.strategy,
        grad_checkpointing=args.grad_checkpointing,
        allow_offload=args.allow_offload,
        headroom=args.headroom,
        load_dtype=args.load_dtype or _script_load_dtype(args),
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
        script=getattr(args, "script", None) or "train.py",
    )


def _script_load_dtype(args: argparse.Namespace) -> str:
    """--load-dtype left out: what the script loads in (train.py fp32, TRL fp32, a plain loop the checkpoint's bf16);
    an unknown --script falls back to fp32 and check_request names the mistake."""
    from generator.estimate.scripts import FACTS

    facts = FACTS.get(getattr(args, "script", None) or "train.py")
    return facts.load_dtype if facts else "fp32"
