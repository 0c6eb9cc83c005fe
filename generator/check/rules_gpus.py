"""gpu_ids rules: type (launch calls .split on it), count vs processes, ids this machine lacks, CUDA_DEVICE_ORDER."""

from __future__ import annotations

from generator.check.types import CheckContext, Finding
from generator.check.view import as_int, distributed_type, gpu_ids, num_machines, per_node_processes
from generator.errors import UserError


def gpu_ids_type(cfg: dict, ctx: CheckContext) -> list[Finding]:
    if "gpu_ids" not in cfg or cfg["gpu_ids"] is None or isinstance(cfg["gpu_ids"], str):
        ids = gpu_ids(cfg)
        if ids is None:
            return [
                Finding(
                    "error",
                    "gpu_ids",
                    f"{cfg['gpu_ids']!r} is not 'all' or a comma list of GPU indices.",
                    "write e.g. gpu_ids: 0,1,2,3.",
                    "gpu_ids_type",
                )
            ]
        return []
    ids, raw = gpu_ids(cfg), cfg["gpu_ids"]
    text = ",".join(str(i) for i in ids) if isinstance(ids, list) else None
    return [
        Finding(
            "error",
            "gpu_ids",
            f"is a YAML {type(raw).__name__} ({raw!r}); launch calls .split(',') on it "
            "and crashes with AttributeError.",
            f"write it as a string: gpu_ids: '{text}'." if text else "write a string such as '0,1'.",
            "gpu_ids_type",
            ((("gpu_ids",), text),) if text else (),
        )
    ]


def gpu_ids_count(cfg: dict, ctx: CheckContext) -> list[Finding]:
    ids, per_node = gpu_ids(cfg), per_node_processes(cfg)
    kind = distributed_type(cfg)
    if not isinstance(ids, list):
        return []
    out = []
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        out.append(
            Finding(
                "error",
                "gpu_ids",
                f"lists GPU {dup[0]} more than once; two ranks would share it.",
                "list each GPU once.",
                "gpu_ids_count",
            )
        )
    if kind == "MULTI_GPU" and num_machines(cfg) <= 1 and len(ids) < 2:
        out.append(
            Finding(
                "error",
                "gpu_ids",
                "MULTI_GPU with fewer than two GPU ids: launch raises ValueError.",
                "list at least two GPUs, or use distributed_type: 'NO' for one GPU.",
                "gpu_ids_count",
            )
        )
    if per_node is not None and kind not in (None, "NO") and len(set(ids)) != per_node:
        total = len(set(ids)) * num_machines(cfg)
        if len(ids) < per_node:
            problem = (
                f"{len(ids)} GPU(s) for {per_node} processes per machine: extra processes share GPUs "
                "(cuda:local_rank % visible), so NCCL fails or hangs."
            )
        else:
            problem = f"{len(ids)} GPUs listed but only {per_node} processes per machine: the extra GPUs sit idle."
        out.append(
            Finding(
                "error" if len(ids) < per_node else "warning",
                "num_processes",
                problem,
                f"set num_processes: {total} (GPUs per machine x num_machines) or list {per_node} GPUs.",
                "gpu_ids_count",
                ((("num_processes",), total),),
            )
        )
    return out


def gpu_ids_on_machine(cfg: dict, ctx: CheckContext) -> list[Finding]:
    if ctx.topo is None:
        return []
    have, ids, per_node = set(ctx.topo.indices), gpu_ids(cfg), per_node_processes(cfg)
    if isinstance(ids, list):
        missing = sorted(set(ids) - have)
        if missing:
            return [
                Finding(
                    "error",
                    "gpu_ids",
                    f"GPU {missing[0]} does not exist here (this machine has "
                    f"{len(have)}: {','.join(map(str, sorted(have)))}).",
                    "list GPUs this machine has.",
                    "gpu_ids_on_machine",
                )
            ]
    elif ids == "all" and per_node is not None and distributed_type(cfg) not in (None, "NO"):
        if per_node > len(have):
            return [
                Finding(
                    "error",
                    "num_processes",
                    f"{per_node} processes per machine but this machine has {len(have)} GPUs.",
                    f"use at most {len(have)} per machine.",
                    "gpu_ids_on_machine",
                )
            ]
        if per_node < len(have):
            fix, patch = "pin the GPUs with an explicit gpu_ids list.", ()
            if num_machines(cfg) == 1 and per_node >= 2:
                from generator.topology import best_subset

                try:
                    best = ",".join(map(str, best_subset(ctx.topo, per_node, exclude=ctx.exclude).gpu_ids))
                    fix, patch = f"use gpu_ids: {best} (the best-wired {per_node}).", ((("gpu_ids",), best),)
                except UserError:  # --exclude leaves too few GPUs
                    pass
            return [
                Finding(
                    "warning",
                    "gpu_ids",
                    f"'all' with {per_node} of {len(have)} GPUs: ranks take cuda:0.."
                    f"{per_node - 1} in CUDA's fastest-first order, not the best-wired subset.",
                    fix,
                    "gpu_ids_on_machine",
                    patch,
                )
            ]
    return []


def cuda_device_order(cfg: dict, ctx: CheckContext) -> list[Finding]:
    ids = gpu_ids(cfg)
    if not isinstance(ids, list):
        return []
    return [
        Finding(
            "info",
            "gpu_ids",
            "ids are read in CUDA's enumeration order, which is fastest-first unless "
            "CUDA_DEVICE_ORDER=PCI_BUS_ID; nvidia-smi and topology ids are PCI order.",
            "launch with CUDA_DEVICE_ORDER=PCI_BUS_ID accelerate launch ... (accelerate never sets it).",
            "cuda_device_order",
        )
    ]


def single_process_types(cfg: dict, ctx: CheckContext) -> list[Finding]:
    n = as_int(cfg.get("num_processes"))
    if distributed_type(cfg) in ("FSDP", "DEEPSPEED") and n == 1 and num_machines(cfg) == 1:
        return [
            Finding(
                "info",
                "num_processes",
                "1 process: sharding over one GPU saves nothing (ZeRO/FSDP only help with offload here).",
                "use more GPUs, or 'NO' unless you need CPU offload.",
                "single_process_types",
            )
        ]
    return []


def fp8_needs_fp8_gpu(cfg: dict, ctx: CheckContext) -> list[Finding]:
    """train.py --precision fp8 (from the header's command or --precision) on GPUs without fp8 tensor cores."""
    from generator.estimate.precision import fp8_refusal, fp8_supported

    if ctx.workload.precision != "fp8" or ctx.topo is None or not ctx.topo.gpus:
        return []
    name = ctx.topo.gpus[0].name
    if fp8_supported(name):
        return []
    problem, fix = fp8_refusal(name).split("; ", 1)
    return [Finding("error", "precision", problem.replace("--precision fp8", "fp8") + ".", fix + ".", "fp8_gpu")]


def fp8_not_on_deepspeed(cfg: dict, ctx: CheckContext) -> list[Finding]:
    """train.py --precision fp8 under a DeepSpeed config: train.py refuses it (its torchao path is not built for
    DeepSpeed engines)."""
    if ctx.workload.precision != "fp8" or cfg.get("distributed_type") != "DEEPSPEED":
        return []
    problem = (
        "train.py --precision fp8 refuses a DeepSpeed config: its float8 path (torchao) is not built for DeepSpeed."
    )
    fix = "plan a DDP or FSDP config for fp8 (python -m generator plan --precision fp8), or run in bf16."
    return [Finding("error", "precision", problem, fix, "fp8_deepspeed")]


RULES = [
    gpu_ids_type, gpu_ids_count, gpu_ids_on_machine, cuda_device_order, single_process_types, fp8_needs_fp8_gpu,
    fp8_not_on_deepspeed,
]  # fmt: skip
