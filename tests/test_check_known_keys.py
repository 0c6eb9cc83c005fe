"""The checker's key tables (kept by hand so `check` never imports accelerate/torch) match the installed accelerate."""

import dataclasses

import pytest

from generator.check import known_keys as K

accelerate_launch = pytest.importorskip("accelerate.commands.launch")
config_args = pytest.importorskip("accelerate.commands.config.config_args")


@pytest.fixture(scope="module")
def parser_dests() -> dict[str, set[str]]:
    parser = accelerate_launch.launch_command_parser()
    return {g.title: {a.dest for a in g._group_actions} for g in parser._action_groups}


def test_top_level_keys_are_cluster_config_fields():
    fields = {f.name for f in dataclasses.fields(config_args.ClusterConfig)}
    assert fields == K.TOP_LEVEL


def test_deprecated_top_level_keys_are_still_converted_by_process_config():
    cfg = config_args.ClusterConfig.process_config({"distributed_type": "NO", "fp16": True, "dynamo_backend": "NO"})
    assert set(K.DEPRECATED_TOP_LEVEL) & set(cfg) == set()
    assert cfg["mixed_precision"] == "fp16"


def test_ignored_scalars_have_non_none_cli_defaults(parser_dests):
    parser = accelerate_launch.launch_command_parser()
    defaults = {a.dest: a.default for a in parser._actions}
    for key, default in K.IGNORED_SCALARS.items():
        assert defaults[key] == default and defaults[key] is not None, key


@pytest.mark.parametrize(
    ("table", "group", "extra"),
    [
        (K.FSDP, "FSDP Arguments", {"fsdp_ignored_modules"}),  # read via getattr in utils/launch.py
        (K.DEEPSPEED, "DeepSpeed Arguments", set()),
        (K.PARALLELISM, "ParallelismConfig Arguments", set()),
        (K.FP8, "FP8 Arguments", set()),
    ],
)
def test_section_tables_match_launch_parser(parser_dests, table, group, extra):
    assert parser_dests[group] | extra == set(table)


def test_dynamo_keys_are_launch_args(parser_dests):
    assert set(K.DYNAMO) <= parser_dests["Resource Selection Arguments"]


def test_fsdp_ignored_modules_is_exported_by_launch():
    import inspect

    from accelerate.utils import launch as launch_utils

    assert "fsdp_ignored_modules" in inspect.getsource(launch_utils.prepare_multi_gpu_env)


def test_distributed_types_and_precisions_match_enums():
    from accelerate.utils.dataclasses import DistributedType, PrecisionType

    assert {t.value for t in DistributedType} == set(K.DISTRIBUTED_TYPES)
    assert {p.value for p in PrecisionType} == set(K.MIXED_PRECISION)


def test_fsdp_launch_default_version_is_1():
    parser = accelerate_launch.launch_command_parser()
    assert next(a.default for a in parser._actions if a.dest == "fsdp_version") == "1"
