"""Turn a Plan into the files `accelerate launch` reads and the exact command to run them.

`render` is pure (text in memory); `write` puts the files on disk, all or nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from generator.emit import command as _command
from generator.emit.accelerate_yaml import accelerate_dict, dump_yaml
from generator.emit.command import launch_command, nccl_env, train_args
from generator.emit.deepspeed_json import deepspeed_dict, ds_json_path, dump_json, hpz_partition_size
from generator.emit.header import header_lines, yaml_header
from generator.emit.invariants import check_plan
from generator.emit.slurm import render_slurm, slurm_path
from generator.fileio import atomic_write, check_writable
from generator.plan.types import Plan

__all__ = ["Emitted", "render", "write", "train_args"]


@dataclass(frozen=True)
class Emitted:
    files: dict[str, str]
    """Path -> full text: the YAML at config_path, `<stem>.ds.json` beside it when a DeepSpeed setting needs one,
    and `<stem>.slurm.sh` (a SLURM batch script) for multi-machine plans."""
    launch_command: str
    """The exact shell command, every value quoted."""
    env: dict[str, str]
    """Environment hints (already in launch_command)."""
    yaml_dict: dict
    """The YAML content as data (what `yaml.safe_load` of the file returns)."""
    config_path: str = ""
    """Which of `files` is the Accelerate YAML (written last, so it never points at a missing JSON)."""


def render(plan: Plan, config_path: str, train_args: Sequence[str] = (), notes: Sequence[str] = ()) -> Emitted:
    """Files and command for `plan`. `train_args` are extra train.py flags appended after the plan's own
    (e.g. --dataset, --max-steps, --output-dir). `notes`: extra header lines (the measured trial section)."""
    check_plan(plan)
    # train.py takes the plan's flags plus the extras; TRL's CLI gets its own flags (emit.script_cli) with the extras
    # in its spelling; a plain loop takes none
    args = _command.train_args(plan) + list(train_args) if plan.workload.script == "train.py" else list(train_args)
    env = nccl_env(plan)
    hpz = hpz_partition_size(plan)
    json_path = ds_json_path(config_path) if hpz else None
    cfg = accelerate_dict(plan, json_path)
    command = launch_command(plan, config_path, args, env)
    lines = header_lines(plan, command, json_path, env, hpz, notes)
    files = {config_path: yaml_header(lines) + dump_yaml(cfg)}
    if json_path and hpz:
        files[json_path] = dump_json(deepspeed_dict(plan, hpz, lines))
    if plan.num_machines > 1:
        files[slurm_path(config_path)] = render_slurm(plan, config_path, train_args)
    return Emitted(files=files, launch_command=command, env=env, yaml_dict=cfg, config_path=config_path)


def write(emitted: Emitted, force: bool) -> list[Path]:
    """Write every file atomically. All targets are checked before the first write; if a later write fails,
    files this call created are removed again (a replaced file cannot be restored, hence the check first)."""
    order = sorted(emitted.files, key=lambda k: k == emitted.config_path)  # YAML last: never points at a missing JSON
    targets = {k: check_writable(k, force) for k in order}
    existed = {k: p.exists() for k, p in targets.items()}
    written: list[Path] = []
    try:
        for k in order:
            written.append(atomic_write(targets[k], emitted.files[k], force))
    except BaseException:
        for k, p in zip(order, written, strict=False):  # written is a prefix of order
            if not existed[k]:
                p.unlink(missing_ok=True)
        raise
    return written
