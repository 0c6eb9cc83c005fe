"""Reject impossible requests up front, with one line each saying how to fix them."""

from __future__ import annotations

from generator.errors import UserError, require_at_least_one
from generator.estimate.attention import KERNELS
from generator.estimate.scripts import SCRIPTS
from generator.estimate.types import LOAD_DTYPES, METHODS, STRATEGIES
from generator.plan.compile_lever import compile_problem
from generator.plan.fabrics import FABRICS
from generator.plan.precision import PRECISION_CHOICES, request_problem
from generator.plan.types import PlanRequest


def check_request(request: PlanRequest) -> None:
    r = request
    _one_of("--method", r.method, METHODS)
    _one_of("--strategy", r.strategy, ("auto", *STRATEGIES))
    _one_of("--grad-checkpointing", r.grad_checkpointing, ("auto", "on", "off"))
    _one_of("--load-dtype", r.load_dtype, ("auto", *LOAD_DTYPES))
    _one_of("--optimizer", r.optimizer, ("adamw", "adamw8bit"))
    _one_of("--attention", r.attention, ("auto", *KERNELS))
    _one_of("--script", r.script, SCRIPTS)
    _one_of("--precision", r.precision, PRECISION_CHOICES)
    for problem in (request_problem(r), compile_problem(r)):
        if problem:
            raise UserError(problem)
    if r.fabric is not None:
        _one_of("--fabric", r.fabric, tuple(FABRICS))
    for flag, value in (
        ("--seq-len", r.seq_len),
        ("--micro-batch", r.micro_batch),
        ("--global-batch", r.global_batch),
        ("--num-gpus", r.num_gpus),
        ("--num-machines", r.num_machines),
        ("--lora-r", r.lora_r),
        ("--doc-tokens", r.doc_tokens),
    ):
        require_at_least_one(flag, value)
    if not 0.0 <= r.headroom < 0.9:
        raise UserError(f"--headroom is the fraction of GPU memory kept free: between 0 and 0.9, got {r.headroom}")
    if not 0 <= r.machine_rank < r.num_machines:
        raise UserError(
            f"--machine-rank must be between 0 and {r.num_machines - 1} (--num-machines), got {r.machine_rank}"
        )
    if not 1 <= r.main_process_port <= 65535:
        raise UserError(f"--main-process-port must be a TCP port (1-65535), got {r.main_process_port}")
    if r.inter_node_gbps is not None and not r.inter_node_gbps > 0:
        raise UserError(f"--inter-node-gbps must be a positive bandwidth in GB/s, got {r.inter_node_gbps}")


def _one_of(flag: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise UserError(f"{flag} {value!r} is not one of: {', '.join(allowed)}")
