"""Validate an emitted config with accelerate's own code, the way `accelerate launch` reads it.

The launch-side helpers are private (`_validate_launch_command`, `prepare_*_env`); they were checked against
accelerate 1.15, the range pyproject.toml pins (>=1.15,<1.16). Nothing here starts a process or needs a GPU.
"""

from __future__ import annotations

import contextlib
import os
import socket
import warnings
from pathlib import Path
from unittest import mock

ENV_PREFIXES = ("ACCELERATE", "FSDP", "PARALLELISM", "CUDA_VISIBLE_DEVICES")


def free_port() -> int:
    """A port nobody listens on: launch refuses a busy main_process_port on machine rank 0 of a multi-node job."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_level1(path: str):
    """Level 1: the schema loader (unknown top-level keys, missing distributed_type, bad enum strings)."""
    from accelerate.commands.config.config_args import load_config_from_file

    return load_config_from_file(path)


def launch_level2(path: str, extra: tuple[str, ...] = ()):
    """Level 2: parse like `accelerate launch --config_file path [extra] train.py`, merge the YAML, and build the
    child environment as the launcher would. Returns (args, env)."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import prepare_deepspeed_cmd_env, prepare_multi_gpu_env, prepare_simple_launcher_cmd_env

    args = launch_command_parser().parse_args(["--config_file", path, *extra, "train.py"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        args, defaults, mp_from_config = _validate_launch_command(args)
        if args.use_deepspeed:  # as launch_command() does before deepspeed_launcher()
            fields = list(defaults.deepspeed_config) + (["mixed_precision"] if mp_from_config else [])
            args.deepspeed_fields_from_accelerate_config = ",".join(fields)
            return args, prepare_deepspeed_cmd_env(args)[1]
        if args.multi_gpu or args.use_fsdp:
            return args, prepare_multi_gpu_env(args)
        return args, prepare_simple_launcher_cmd_env(args)[1]


@contextlib.contextmanager
def child_environ(env: dict[str, str]):
    """os.environ as a launched child would see the accelerate variables; fully restored afterwards."""
    with mock.patch.dict(os.environ):
        for k in [k for k in os.environ if k.startswith(ENV_PREFIXES)]:
            del os.environ[k]
        os.environ.update({k: v for k, v in env.items() if k.startswith(ENV_PREFIXES)})
        yield


def torchrun_config(args):
    """What torch.distributed.run would be given for a multi-GPU/FSDP launch (rendezvous backend, endpoint, ...)."""
    import torch.distributed.run as distrib_run
    from accelerate.commands.launch import _filter_args

    targs = _filter_args(
        args, distrib_run.get_args_parser(), ["--training_script", "train.py", "--training_script_args", []]
    )
    return distrib_run.config_from_args(targs)[0]


def shard_groups(replicate: int, shard: int) -> list[list[int]]:
    """Ranks in each FSDP shard group, from accelerate's own device mesh on a fake process group."""
    import torch.distributed as dist
    from accelerate.parallelism_config import ParallelismConfig
    from torch.testing._internal.distributed.fake_pg import FakeStore

    groups = []
    for rank in range(0, replicate * shard, shard):
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=replicate * shard)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mesh = ParallelismConfig(dp_replicate_size=replicate, dp_shard_size=shard).build_device_mesh("cpu")
            groups.append(mesh["dp_shard"].mesh.tolist())
        finally:
            dist.destroy_process_group()
    return groups


def check_three_levels(path: str) -> dict:
    """Generic checks for any Accelerate YAML (committed configs, recipes): loads, launches with the right GPUs and
    process counts, and the plugins accept the environment. Returns the loaded config as a dict."""
    import yaml
    from accelerate.parallelism_config import ParallelismConfig
    from accelerate.utils import DeepSpeedPlugin, FullyShardedDataParallelPlugin

    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    cfg = load_level1(path)
    ids = raw["gpu_ids"]
    assert isinstance(ids, str), f"{path}: gpu_ids must be a YAML string"
    assert cfg.num_processes == len(ids.split(",")) * cfg.num_machines, f"{path}: gpu_ids vs num_processes"
    args, env = launch_level2(path)
    assert env["CUDA_VISIBLE_DEVICES"] == ids
    with child_environ(env):
        if env.get("ACCELERATE_USE_FSDP") == "true":
            fsdp = FullyShardedDataParallelPlugin()
            assert fsdp.fsdp_version == 2 and fsdp.auto_wrap_policy is not None
        if env.get("ACCELERATE_USE_PARALLELISM_CONFIG") == "true":
            assert ParallelismConfig().total_size == cfg.num_processes
        if env.get("ACCELERATE_USE_DEEPSPEED") == "true":
            ds = DeepSpeedPlugin()
            ds.set_mixed_precision(env["ACCELERATE_MIXED_PRECISION"])
            assert ds.deepspeed_config["bf16"]["enabled"] is True
    return raw
