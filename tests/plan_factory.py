"""Hand-built Plans for the emitter tests (the planner is tested on its own). Numbers are made up, not measured."""

from __future__ import annotations

import dataclasses

from generator.estimate.types import Estimate, Workload
from generator.model import load_model
from generator.model.types import ModelSpec
from generator.plan.types import Plan

# The bundled preset under its hub id (the name the emitted launch commands carry).
MISTRAL = dataclasses.replace(load_model("mistral-7b"), name="mistralai/Mistral-7B-v0.1")


def estimate(strategy: str, fits: bool = True) -> Estimate:
    return Estimate(
        strategy=strategy,
        fits=fits,
        peak_gb=61.234,
        reserved_gb=66.5,
        breakdown={"params": 14.5, "grads": 14.5, "optimizer": 29.0, "activations": 3.234},
        capacity_gb=126.9,
        comm_gb_per_step=2.5,
        comm_s=0.4,
        compute_s=8.0,
        step_s=8.4,
        tokens_per_s_per_gpu=3901.4,
        mfu=0.412,
    )


def make_plan(
    strategy: str = "ddp",
    gpu_ids: tuple[int, ...] = (0, 1),
    num_machines: int = 1,
    micro_batch: int = 1,
    grad_accum: int = 4,
    grad_checkpointing: bool = True,
    method: str = "full",
    model: ModelSpec = MISTRAL,
    **plan_fields,
) -> Plan:
    """A consistent Plan: the global batch follows from micro-batch x accumulation x processes."""
    workload = Workload(
        method=method, micro_batch=micro_batch, grad_accum=grad_accum, grad_checkpointing=grad_checkpointing
    )
    est = estimate(strategy)
    fields = dict(
        model=model,
        workload=workload,
        strategy=strategy,
        gpu_ids=tuple(gpu_ids),
        num_machines=num_machines,
        global_batch=micro_batch * grad_accum * len(gpu_ids) * num_machines,
        estimate=est,
        estimates=(est,),
        reasons=("fits with 10% headroom", "NVSwitch: all-reduce at full bandwidth"),
        machine="machine:hgx-h200-8",
        gpu_name="NVIDIA H200",
    )
    fields.update(plan_fields)
    return Plan(**fields)


def replace(plan: Plan, **changes) -> Plan:
    return dataclasses.replace(plan, **changes)


def multi_node(strategy: str, port: int, **kw) -> Plan:
    return make_plan(
        strategy,
        gpu_ids=tuple(range(8)),
        num_machines=2,
        main_process_ip="10.0.0.1",
        main_process_port=port,
        **kw,
    )


def variants(port: int = 29500) -> dict[str, Plan]:
    """Every variant the emitter must get right, by name."""
    four = (0, 1, 2, 3)
    return {
        "ddp_1gpu": make_plan("ddp", gpu_ids=(3,)),
        "ddp_multi": make_plan("ddp", gpu_ids=(4, 5, 6, 7), main_process_port=port),
        "fsdp": make_plan("fsdp", gpu_ids=four, main_process_port=port),
        "fsdp_grad_op": make_plan("fsdp_grad_op", gpu_ids=four, grad_checkpointing=False, main_process_port=port),
        "hsdp": make_plan(
            "hsdp", gpu_ids=(0, 2, 4, 6, 1, 3, 5, 7), hsdp_replicate=2, hsdp_shard=4, main_process_port=port
        ),
        "zero1": make_plan("zero1", gpu_ids=four, main_process_port=port),
        "zero2": make_plan("zero2", gpu_ids=four, main_process_port=port),
        "zero3": make_plan("zero3", gpu_ids=four, main_process_port=port),
        "zero2_offload": make_plan("zero2_offload", gpu_ids=four, main_process_port=port),
        "zero3_offload": make_plan("zero3_offload", gpu_ids=four, main_process_port=port),
        "zero3_hpz": make_plan(
            "zero3", gpu_ids=(0, 2, 4, 6, 1, 3, 5, 7), hsdp_replicate=2, hsdp_shard=4, main_process_port=port
        ),
        "multi_node_hsdp": multi_node("hsdp", port, hsdp_replicate=2, hsdp_shard=8),
        "multi_node_ddp": multi_node("ddp", port),
        "multi_node_zero3": multi_node("zero3", port),
        "lora_ddp": make_plan("ddp", gpu_ids=(0, 1), method="lora", main_process_port=port),
    }
