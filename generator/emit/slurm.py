"""A SLURM batch script for a multi-machine Plan: one `accelerate launch` per node through `srun`.

Shell safety: every value from the plan or the user is a single shlex-quoted word assigned to a variable or passed
as an argument; the only code run per node is a fixed literal (`NODE_SCRIPT`) that expands `$SLURM_NODEID` on that
node (the batch shell's own SLURM_NODEID is always 0). Nothing is ever re-parsed by a shell.

Preemption: `--signal=USR1@120` makes SLURM send SIGUSR1 to every process of the job step (proctrack/cgroup, the
usual setup on GPU clusters) two minutes before the end. train.py catches it, finishes the step, checkpoints and
exits 75. The launcher must not die of it first (Python's default for SIGUSR1 is to exit, and torchrun does not
handle it), so the per-node script ignores SIGUSR1 before exec; train.py installs its own handler.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from generator.emit.command import DATA_ARGS, DATA_NOTE, TRAIN_SCRIPT, launch_flags, nccl_env
from generator.emit.command import train_args as plan_train_args
from generator.emit.header import clean
from generator.emit.invariants import check_plan
from generator.plan.types import Plan

# Runs on each node; "$@" is the accelerate launch argument list, passed as words, never re-parsed.
NODE_SCRIPT = 'trap "" USR1; exec accelerate launch --machine_rank "$SLURM_NODEID" "$@"'


def job_name(plan: Plan) -> str:
    """#SBATCH lines are parsed by sbatch, not a shell: keep the name to characters that need no quoting."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{plan.model.name.rsplit('/', 1)[-1]}-{plan.strategy}").strip("-.")
    return name[:64] or "train"


def slurm_path(config_path: str) -> str:
    """`dir/name.yaml` -> `dir/name.slurm.sh`."""
    p = Path(config_path)
    return str(p.with_name(p.stem + ".slurm.sh"))


def data_args(train_args: Sequence[str]) -> list[str]:
    """--dataset and --max-steps at train.py's defaults, each unless the caller's train args already name it: a
    submitted job should say what it trains on and for how long."""
    pairs = zip(DATA_ARGS[::2], DATA_ARGS[1::2], strict=True)
    return [word for flag, value in pairs if flag not in train_args for word in (flag, value)]


def render_slurm(plan: Plan, config_path: str, train_args: Sequence[str] = ()) -> str:
    """The batch script text for `sbatch`. Run it from the directory the config path is relative to."""
    check_plan(plan)
    if plan.num_machines < 2:
        raise ValueError("a SLURM script is emitted for multi-machine plans only")
    q = shlex.quote
    flags = launch_flags(plan, machine_rank=False)
    args = plan_train_args(plan) + data_args(train_args) + list(train_args)
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", **nccl_env(plan)}
    gpus_per_node = max(plan.gpu_ids) + 1
    what = f"{plan.strategy} on {plan.num_machines} machines x {len(plan.gpu_ids)} GPUs, config {config_path}"
    lines = [
        "#!/bin/bash",
        f"# {clean(what)}",
        "# Written by dist-config-generator. Submit with `sbatch THIS_FILE` from the directory the config path is",
        "# relative to. The config's gpu_ids are physical ids, so the job takes whole nodes (--exclusive) and every",
        "# GPU up to the highest id. Two minutes before the time limit SLURM sends SIGUSR1 to every process of the",
        "# step: the launcher ignores it, train.py finishes the step, writes a checkpoint and exits 75 (resume with",
        "# --resume). No --kill-on-bad-exit: the first node to finish its checkpoint would kill the others mid-save.",
        "# The rendezvous on MAIN_IP:main_process_port has no authentication: keep it on the private network.",
        f"#SBATCH --job-name={job_name(plan)}",
        f"#SBATCH --nodes={plan.num_machines}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={gpus_per_node}",
        "#SBATCH --exclusive",
        "#SBATCH --signal=USR1@120",
        "set -euo pipefail",
        "",
        *[f"export {k}={q(v)}" for k, v in env.items()],
        f"CONFIG={q(config_path)}",
        # no `| head -n 1`: under pipefail, scontrol's SIGPIPE would abort the job
        'HOSTS="$(scontrol show hostnames "$SLURM_JOB_NODELIST")"',
        "MAIN_IP=\"${HOSTS%%$'\\n'*}\"",
        "LAUNCH_FLAGS=(" + " ".join(q(f) for f in flags) + ")",
        DATA_NOTE,
        "TRAIN_ARGS=(" + " ".join(q(a) for a in args) + ")",
        "",
        f"srun --nodes={plan.num_machines} --ntasks-per-node=1 \\",
        f"    bash -c {q(NODE_SCRIPT)} accelerate-node \\",
        '    --config_file "$CONFIG" --main_process_ip "$MAIN_IP" "${LAUNCH_FLAGS[@]}" \\',
        f'    {TRAIN_SCRIPT} "${{TRAIN_ARGS[@]}}"',
    ]
    return "\n".join(lines) + "\n"
