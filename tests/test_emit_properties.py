"""Property test over random plans: whatever the strategy, GPUs, machines and names, the YAML loads back to exactly
the dict (no YAML-1.1 accidents), the header stays comments, and the command splits back into the intended words."""

from __future__ import annotations

import shlex

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from plan_factory import make_plan, replace

from generator.emit import render
from generator.model.presets import launch_model

SINGLE = ["ddp", "zero1", "zero2", "zero3", "zero2_offload", "zero3_offload", "fsdp", "fsdp_grad_op"]
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)


@st.composite
def plans(draw):
    strategy = draw(st.sampled_from([*SINGLE, "hsdp"]))
    machines = draw(st.integers(1, 3))
    per_node = draw(st.sampled_from([2, 4, 8] if strategy == "hsdp" else [1, 2, 3, 4, 8]))
    ids = tuple(draw(st.permutations(range(8)))[:per_node])
    extra = {}
    if strategy == "hsdp":
        shard = draw(st.sampled_from([s for s in (2, 4, 8) if s <= per_node and per_node % s == 0]))
        extra = {"hsdp_shard": shard, "hsdp_replicate": per_node * machines // shard}
    if machines > 1:
        extra |= {"main_process_ip": draw(TEXT), "machine_rank": draw(st.integers(0, machines - 1))}
    plan = make_plan(strategy, gpu_ids=ids, num_machines=machines, grad_accum=draw(st.integers(1, 8)), **extra)
    name, cls, reason = draw(TEXT), draw(st.sampled_from(["MistralDecoderLayer", "", "NO", "0"])), draw(TEXT)
    return replace(plan, model=replace(plan.model, name=name, decoder_layer_cls=cls), reasons=(reason,))


@settings(max_examples=150, deadline=None)
@given(plans(), st.sampled_from(["c.yaml", "out dir/it's.yaml", "a;b/$(x).yaml"]))
def test_any_plan_round_trips(plan, path):
    em = render(plan, path)
    text = em.files[path]
    assert yaml.safe_load(text) == em.yaml_dict
    assert em.yaml_dict["gpu_ids"] == ",".join(map(str, plan.gpu_ids))
    assert em.yaml_dict["num_processes"] == len(plan.gpu_ids) * plan.num_machines
    header = text.split("\n\n", 1)[0]
    assert all(line.startswith("#") for line in header.split("\n"))
    words = shlex.split(em.launch_command)
    assert words[words.index("--config_file") + 1] == path
    # whatever the name, the launch's model word survives quoting (tests/test_launch_model.py: which word it is)
    assert words[words.index("--model") + 1] == launch_model(plan.model.name)
