"""Fuzz the config checker (issue 9): any text gives a mapping or one UserError; any mapping gives findings, and
--fix output re-reads to the same mapping. Fixed budgets; the number of cases tried is printed."""

import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generator.check import CheckContext, known_keys, parse_config, run_rules
from generator.check.fix import dump_config, fix_config
from generator.errors import UserError
from generator.estimate.types import Workload
from generator.model import load_model
from generator.topology import load_topology

TEXT_CASES, CONFIG_CASES = 2000, 1000
# Mapping fuzz stays printable: PyYAML itself folds exotic line breaks (U+0085) in keys, which is not ours to test.
PRINTABLE = string.ascii_letters + string.digits + string.punctuation + " "
counts = {"text": 0, "config": 0}

YAML_TOKENS = ["a", "distributed_type", "gpu_ids", ":", ": ", "\n", "  ", "- ", "[", "]", "{", "}", ",", "&x", "*x",
               "!!python/object", "!!binary", "!!set", "'", '"', "#", "NO", "no", "0,1", "0", "1e9", "~", "---", "? ",
               "<<: ", "|", ">", "%YAML 1.1", "\t", "\x00", "2001-12-14"]  # fmt: skip
yamlish = st.lists(st.sampled_from(YAML_TOKENS) | st.text(max_size=5), max_size=40).map("".join)


@settings(max_examples=TEXT_CASES, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=st.one_of(yamlish, st.text(max_size=200)))
def test_any_text_gives_a_mapping_or_one_user_error(text):
    counts["text"] += 1
    try:
        data, dups = parse_config(text)
    except UserError as exc:
        assert str(exc) and "\n" not in str(exc)
    else:
        assert isinstance(data, dict) and isinstance(dups, tuple)


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 20), st.floats(allow_nan=False), st.text(PRINTABLE, max_size=12),
    st.sampled_from(["NO", "FSDP", "DEEPSPEED", "MULTI_GPU", "all", "0,1", "0,1,2,3", "bf16", "no", "FULL_SHARD",
                     "HYBRID_SHARD", "NO_WRAP", "LOCAL_STATE_DICT", "cpu", "8.8.8.8", "10.0.0.1", "c10d"]),
)  # fmt: skip
values = scalars | st.lists(scalars, max_size=3) | st.dictionaries(st.text(PRINTABLE, max_size=6), scalars, max_size=3)
section_keys = sorted(known_keys.FSDP | known_keys.DEEPSPEED | known_keys.PARALLELISM) + ["dp_shard_size", "zero"]
sections = st.dictionaries(st.sampled_from(section_keys) | st.text(PRINTABLE, max_size=8), values, max_size=5)
top_keys = sorted(known_keys.TOP_LEVEL | set(known_keys.DEPRECATED_TOP_LEVEL)) + ["num_proceses", "ddp"]
configs = st.dictionaries(
    st.sampled_from(top_keys) | st.text(PRINTABLE, max_size=8) | st.integers(0, 3),
    st.one_of(values, sections),
    max_size=8,
)


@pytest.fixture(scope="module")
def contexts():
    return [
        CheckContext(),
        CheckContext(topo=load_topology(machine="h200-nvl-8"), model=load_model("mistral-7b"), workload=Workload()),
        CheckContext(topo=load_topology(machine="pcie-l40s-8"), duplicate_keys=("gpu_ids",)),
    ]


@settings(max_examples=CONFIG_CASES, deadline=None, suppress_health_check=list(HealthCheck))
@given(cfg=configs, which=st.integers(0, 2))
def test_any_mapping_gives_findings_and_fix_round_trips(contexts, cfg, which):
    counts["config"] += 1
    ctx = contexts[which]
    for f in run_rules(cfg, ctx):
        assert f.severity in ("error", "warning", "info") and f.key and f.problem and f.fix
        assert all(isinstance(path, tuple) and len(path) >= 1 for path, _ in f.patch)
    fixed, _ = fix_config(cfg, ctx)
    text = dump_config(fixed)
    again, _ = parse_config(text) if fixed else ({}, ())
    assert again == fixed
    run_rules(again, ctx)


def test_report_fuzz_counts(capsys):
    with capsys.disabled():
        print(f"\n[fuzz] config checker: {counts['text']} text cases, {counts['config']} config cases tried")
    assert counts["text"] + counts["config"] > 0 or pytest.skip("fuzz tests did not run in this session")
