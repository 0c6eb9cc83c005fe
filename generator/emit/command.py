"""The train.py flags for a Plan and the exact `accelerate launch` command line, every value shell-quoted."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from generator.emit.script_cli import custom_words, trainer_words
from generator.estimate.attention import ATTN_IMPLEMENTATION
from generator.estimate.lora_targets import own_linears_adapted
from generator.estimate.scripts import ALL_LINEAR, lora_modules
from generator.estimate.types import DEFAULT_LOAD_DTYPE
from generator.model.presets import launch_model
from generator.plan.types import Plan

TRAIN_SCRIPT = "train.py"
DATA_ARGS = ("--dataset", "recipes/data/synthetic_instruct.jsonl", "--max-steps", "100")
"""Written out in recipe train commands and SLURM scripts, although they are train.py's defaults, so a copied command
says what it trains on and for how long (tests/test_recipes_commands.py keeps them equal to train.py's defaults)."""
DATA_NOTE = (
    "# recipes/data/ is a small synthetic sample: replace --dataset with your data and --max-steps with your run"
)


def train_args(plan: Plan) -> list[str]:
    """train.py flags matching the plan. `--grad-checkpointing` states the intent; under FSDP the YAML's
    fsdp_activation_checkpointing does the work and train.py skips HF gradient checkpointing (no double wrapping)."""
    w = plan.workload
    args = [
        "--model", launch_model(plan.model.name),
        "--seq-len", str(w.seq_len),
        "--micro-batch", str(w.micro_batch),
        "--global-batch", str(plan.global_batch),
        "--grad-checkpointing" if w.grad_checkpointing else "--no-grad-checkpointing",
    ]  # fmt: skip
    if w.method != "full":
        args += ["--method", w.method, "--lora-r", str(w.lora_r)]
        if w.lora_targets != ALL_LINEAR:  # train.py adapts every linear layer by default
            args += ["--lora-targets", ",".join(lora_modules(w.lora_targets))]
        elif own_linears_adapted(plan.model):  # ... by the llama family's names, which this architecture does not use
            args += ["--lora-targets", "all-linear"]
    if w.load_dtype != DEFAULT_LOAD_DTYPE[w.method]:  # train.py's --load-dtype auto resolves per method
        args += ["--load-dtype", w.load_dtype]
    if w.liger:
        args.append("--liger")
    if w.attention != "sdpa":  # train.py's default
        args += ["--attn-implementation", ATTN_IMPLEMENTATION[w.attention]]
    if w.precision == "fp8":  # train.py converts the Linears with torchao itself (docs/fp8.md); the YAML stays bf16
        args += ["--precision", "fp8"]
    elif w.compiled_layers:  # float8 compiles the layers itself
        args.append("--compile-layers")
    return args


def cpu_affinity_useful(plan: Plan) -> bool:
    """NUMA pinning pays off with several GPUs per machine. Accelerate looks the GPU up in NVML by local rank,
    ignoring CUDA_VISIBLE_DEVICES, so it pins the right cores only when gpu_ids are 0..n-1 in order."""
    return len(plan.gpu_ids) > 1 and tuple(plan.gpu_ids) == tuple(range(len(plan.gpu_ids)))


def launch_flags(plan: Plan, machine_rank: bool = True) -> list[str]:
    """Flags accelerate 1.15 does not take from the YAML (their argparse defaults shadow the YAML values).

    Multi-machine: static rendezvous at main_process_ip:port with the node rank from --machine_rank. Not c10d:
    with --same_network accelerate hands torchrun master_addr/port, which c10d ignores (it then rendezvouses at
    localhost:29400 on every machine); checked through torch.distributed.run.config_from_args in the tests.
    """
    flags: list[str] = []
    if plan.num_machines > 1:
        flags += ["--rdzv_backend", "static", "--same_network"]
        if machine_rank:  # the SLURM script passes each node's own
            flags += ["--machine_rank", str(plan.machine_rank)]
    if cpu_affinity_useful(plan):
        flags.append("--enable_cpu_affinity")
    return flags


def launch_command(
    plan: Plan, config_path: str, script_args: Sequence[str], env: Mapping[str, str] | None = None
) -> str:
    """`CUDA_DEVICE_ORDER=PCI_BUS_ID [env] accelerate launch --config_file <path> [flags] <script> <args>`: train.py
    with `script_args`, TRL's own SFT script with its CLI flags (`script_args` then replace its data flags), or the
    user's loop (emit.script_cli)."""
    prefix = ["CUDA_DEVICE_ORDER=PCI_BUS_ID"] + [f"{k}={shlex.quote(v)}" for k, v in sorted((env or {}).items())]
    script = {
        "train.py": lambda: [TRAIN_SCRIPT, *script_args],
        "trainer": lambda: trainer_words(plan, list(script_args)),
        "custom": lambda: custom_words(plan),
    }[plan.workload.script]()
    words = ["accelerate", "launch", "--config_file", config_path, *launch_flags(plan), *script]
    return " ".join(prefix + [shlex.quote(w) for w in words])


def nccl_env(plan: Plan) -> dict[str, str]:
    """NCCL hints. GeForce RTX 40xx cards have no peer-to-peer; with older drivers NCCL still tries it and hangs
    (accelerate forces the same for drivers < 550.40.07). Host shared memory is what NCCL uses anyway."""
    name = plan.gpu_name.upper()
    if len(plan.gpu_ids) > 1 and "RTX 40" in name and "ADA" not in name:
        return {"NCCL_P2P_DISABLE": "1"}
    return {}
