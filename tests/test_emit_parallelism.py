"""Emitted tensor/context-parallel configs pass accelerate 1.15's own code path, and its device mesh forms the
groups the header names (a fake process group: no GPU, no processes)."""

from __future__ import annotations

import functools
import types
import warnings

import pytest
import yaml
from emit_harness import check_three_levels, child_environ, launch_level2

from generator.emit import render, write
from generator.model import load_model
from generator.plan.planner import make_plan
from generator.plan.types import PlanRequest
from generator.topology.machines import load_machine

CASES = {
    "hgx-llama-3.1-8b-lora-s131072": ("hgx-h200-8", "llama-3.1-8b", {"method": "lora", "seq_len": 131072}),
    "hgx-llama-3.1-8b-lora-s65536": ("hgx-h200-8", "llama-3.1-8b", {"method": "lora", "seq_len": 65536}),
    "nvl-llama-3.1-8b-lora-s65536": ("h200-nvl-8", "llama-3.1-8b", {"method": "lora", "seq_len": 65536}),
}
"""Plans that take a tensor/context-parallel layout, planned when a test first asks (not at collection, where every
xdist worker would plan them all)."""


@functools.cache
def _plan(case: str):
    machine, model, kw = CASES[case]
    return make_plan(load_machine(machine), load_model(model), PlanRequest(**kw))


@pytest.mark.parametrize("case", CASES)
def test_the_cases_do_take_layouts(case):
    assert _plan(case).parallel is not None


@pytest.mark.parametrize("case", CASES)
def test_accelerate_accepts_the_config(case, tmp_path):
    from accelerate.parallelism_config import ParallelismConfig
    from accelerate.utils import DistributedType

    plan = _plan(case)

    path = tmp_path / "c.yaml"
    write(render(plan, str(path)), force=True)
    raw = check_three_levels(str(path))
    lay = plan.parallel.layout
    block = raw["parallelism_config"]
    assert block["parallelism_config_tp_size"] == lay.tp and block["parallelism_config_cp_size"] == lay.cp
    _, env = launch_level2(str(path))
    assert env["PARALLELISM_CONFIG_TP_SIZE"] == str(lay.tp) and env["PARALLELISM_CONFIG_CP_SIZE"] == str(lay.cp)
    if lay.cp > 1:
        assert env["PARALLELISM_CONFIG_CP_COMM_STRATEGY"] == "allgather"
    with child_environ(env):
        pc = ParallelismConfig()
        fake = types.SimpleNamespace(
            multi_device=True, num_processes=plan.num_processes, is_fsdp2=True,
            distributed_type=DistributedType.FSDP, is_main_process=True,
        )  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "handler set but size 1" would mean an ignored key
            pc._validate_accelerator(fake)  # total size vs processes, something for FSDP to shard across
    text = path.read_text()
    assert "Parallel layout" in text and "predicted, not measured" in text


@pytest.mark.parametrize("case", CASES)
def test_accelerates_mesh_forms_the_groups_we_print(case):
    import torch.distributed as dist
    from accelerate.parallelism_config import ParallelismConfig
    from torch.testing._internal.distributed.fake_pg import FakeStore

    plan = _plan(case)

    lay, pg = plan.parallel.layout, plan.parallel
    for rank in range(plan.num_processes):
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=plan.num_processes)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mesh = ParallelismConfig(
                    dp_replicate_size=lay.dp_replicate, dp_shard_size=lay.dp_shard, tp_size=lay.tp, cp_size=lay.cp
                ).build_device_mesh("cpu")
            for dim, ours in (("tp", pg.tp_rank_groups), ("cp", pg.cp_rank_groups)):
                if getattr(lay, dim) > 1:
                    theirs = tuple(mesh[dim].mesh.tolist())
                    assert theirs in ours, (dim, rank, theirs)
            fsdp = tuple(mesh["dp_shard_cp"].mesh.flatten().tolist())
            assert fsdp in pg.fsdp_rank_groups
        finally:
            dist.destroy_process_group()


def test_the_yaml_keys_are_all_ones_accelerate_reads():
    from accelerate.commands.launch import launch_command_parser

    known = {a.dest for a in launch_command_parser()._actions}
    for plan in map(_plan, CASES):
        from generator.emit.parallelism import parallelism_block

        assert set(parallelism_block(plan)) <= known
    assert yaml  # keeps the import honest for readers: the YAML path is what is checked above
