"""What render() and write() produce beyond accelerate's own checks: YAML traps, the DeepSpeed-JSON rule, shell
quoting of the launch command, the header, all-or-nothing writes, and the plan invariants accelerate never checks."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess

import pytest
import yaml
from plan_factory import make_plan, replace, variants

from generator import __version__, emit
from generator.emit import accelerate_yaml, render, train_args, write
from generator.errors import UserError

VARIANTS = variants()
FORBIDDEN_WITH_DS_FILE = {
    "zero_stage",
    "offload_optimizer_device",
    "offload_param_device",
    "offload_optimizer_nvme_path",
    "offload_param_nvme_path",
    "gradient_accumulation_steps",
    "gradient_clipping",
    "zero3_save_16bit_model",
}
HOSTILE = [
    "my model",
    'it\'s "quoted"',
    "$(touch PWNED)",
    "`touch PWNED`",
    "a;touch PWNED",
    "x' ; touch PWNED ; '",
    "--model",
    "new\nline",
]


def _body(text: str) -> str:
    """Everything after the comment header."""
    lines = text.splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#"))
    return "".join(lines[first:])


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_yaml_round_trip_has_no_yaml11_accidents(name):
    """safe_load(text) must give back exactly the dict: no 'NO' -> False, no '0' -> 0, no 'no' -> False."""
    em = render(VARIANTS[name], "c.yaml")
    assert yaml.safe_load(em.files["c.yaml"]) == em.yaml_dict
    assert isinstance(em.yaml_dict["gpu_ids"], str)
    assert em.yaml_dict["distributed_type"] in {"NO", "MULTI_GPU", "FSDP", "DEEPSPEED"}


def test_single_gpu_is_quoted_strings():
    text = render(VARIANTS["ddp_1gpu"], "c.yaml").files["c.yaml"]
    assert "distributed_type: 'NO'\n" in text and "gpu_ids: '3'\n" in text
    no_mp = replace(VARIANTS["ddp_1gpu"], workload=replace(VARIANTS["ddp_1gpu"].workload, mixed_precision="no"))
    text = render(no_mp, "c.yaml").files["c.yaml"]
    assert "mixed_precision: 'no'\n" in text and yaml.safe_load(text)["mixed_precision"] == "no"


def test_ds_json_only_when_a_setting_needs_it():
    with_json = {n for n, p in VARIANTS.items() if "c.ds.json" in render(p, "c.yaml").files}
    assert with_json == {"zero3_hpz", "multi_node_zero3"}
    # offload keeps the YAML-only form (no ZeRO++ secondary copy on a GPU the offload tries to free)
    assert "c.ds.json" not in render(replace(VARIANTS["multi_node_zero3"], strategy="zero3_offload"), "c.yaml").files
    multi = {n for n, p in VARIANTS.items() if "c.slurm.sh" in render(p, "c.yaml").files}
    assert multi == {n for n in VARIANTS if n.startswith("multi_node")}


@pytest.mark.parametrize("name", ["zero3_hpz", "multi_node_zero3"])
def test_ds_json_variant_obeys_the_forbidden_keys_rule(name):
    em = render(VARIANTS[name], "cfg/z.yaml")
    ds = em.yaml_dict["deepspeed_config"]
    assert ds["deepspeed_config_file"] == "cfg/z.ds.json"
    assert not FORBIDDEN_WITH_DS_FILE & set(ds)
    assert "mixed_precision" not in em.yaml_dict
    data = json.loads(em.files["cfg/z.ds.json"])
    assert data["bf16"] == {"enabled": True}
    assert data["zero_optimization"]["stage"] == 3
    assert data["gradient_accumulation_steps"] == VARIANTS[name].workload.grad_accum
    assert data["_comment"][0].startswith("Written by dist-config-generator")
    hpz = data["zero_optimization"]["zero_hpz_partition_size"]
    prose = " ".join(line.lstrip("# ") for line in em.files["cfg/z.yaml"].splitlines())  # undo the wrapping
    assert f"copy of 1/{hpz} of the parameters per GPU" in prose


@pytest.mark.parametrize("hostile", HOSTILE)
def test_launch_command_quotes_hostile_model_names(hostile, tmp_path):
    """The command must split back into exactly the intended words, and running it through bash with a stub
    `accelerate` must execute nothing from the name."""
    plan = replace(VARIANTS["fsdp"], model=replace(VARIANTS["fsdp"].model, name=hostile))
    config = f"{tmp_path}/my cfg's $(x).yaml"
    em = render(plan, config, ["--output-dir", "out dir;rm -rf x"])
    words = shlex.split(em.launch_command)
    assert words[0] == "CUDA_DEVICE_ORDER=PCI_BUS_ID"
    assert words[words.index("--config_file") + 1] == config
    assert words[words.index("--model") + 1] == hostile
    assert words[-2:] == ["--output-dir", "out dir;rm -rf x"]
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "accelerate").write_text('#!/bin/sh\nprintf "%s\\0" "$CUDA_DEVICE_ORDER" "$@"\n')
    (stub / "accelerate").chmod(stat.S_IRWXU)
    env = {"PATH": f"{stub}:{os.environ['PATH']}"}
    out = subprocess.run(["bash", "-c", em.launch_command], cwd=tmp_path, env=env, capture_output=True, check=True)
    assert out.stdout.decode().split("\0")[:-1] == ["PCI_BUS_ID", *words[2:]]
    assert not (tmp_path / "PWNED").exists()


def test_hostile_text_cannot_break_the_yaml_header():
    """Line breaks YAML knows (\\n, \\r, U+0085, U+2028) and control characters are escaped in comments."""
    nasty = "a\nb\rc\x85d\u2028e\x1bf\x00g"
    plan = replace(
        VARIANTS["zero3_hpz"], reasons=(nasty,), machine=nasty, model=replace(VARIANTS["zero3_hpz"].model, name=nasty)
    )
    em = render(plan, "c.yaml")
    text = em.files["c.yaml"]
    assert yaml.safe_load(text) == em.yaml_dict
    header = text[: text.index(_body(text))]
    assert all(line.startswith("#") or not line for line in header.split("\n"))
    assert "a\\nb\\rc\\x85d\\u2028e\\x1bf\\x00g" in header
    assert json.loads(em.files["c.ds.json"])["_comment"]


def test_header_says_what_why_where_cost_and_how():
    plan = VARIANTS["hsdp"]
    em = render(plan, "c.yaml")
    header = em.files["c.yaml"][: em.files["c.yaml"].index(_body(em.files["c.yaml"]))]
    assert f"dist-config-generator {__version__}" in header
    assert "Chosen: hsdp" in header and "fits with 10% headroom" in header
    assert "0,2,4,6,1,3,5,7" in header and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in header
    assert "(predicted): 61.2 GB allocated, 66.5 GB reserved" in header
    assert "Throughput (predicted): 3,901 tokens/s per GPU, 8.40 s per optimizer step, MFU 41.2%" in header
    assert "machine:hgx-h200-8" in header
    assert f"#   {em.launch_command}\n" in header
    assert all(len(line) <= 120 for line in header.splitlines() if "accelerate launch" not in line)


def test_output_is_stable():
    for name, plan in VARIANTS.items():
        assert render(plan, "a/b.yaml").files == render(plan, "a/b.yaml").files, name


def test_forced_plan_that_does_not_fit_says_so():
    plan = replace(VARIANTS["ddp_multi"], forced=True, estimate=replace(VARIANTS["ddp_multi"].estimate, fits=False))
    text = render(plan, "c.yaml").files["c.yaml"]
    assert "predicted NOT to fit" in text and "forced" in text


def test_train_args_follow_the_plan():
    assert train_args(VARIANTS["fsdp"]) == [
        "--model", "mistralai/Mistral-7B-v0.1", "--seq-len", "4096", "--micro-batch", "1",
        "--global-batch", "16", "--grad-checkpointing",
    ]  # fmt: skip
    lora = train_args(VARIANTS["lora_ddp"])
    # a fp32 LoRA base is not train.py's auto (bf16 for LoRA), so the command says so
    assert lora[-6:] == ["--method", "lora", "--lora-r", "16", "--load-dtype", "fp32"]
    w = replace(VARIANTS["ddp_multi"].workload, grad_checkpointing=False, load_dtype="bf16", liger=True)
    args = train_args(replace(VARIANTS["ddp_multi"], workload=w))
    assert "--no-grad-checkpointing" in args and args[-3:] == ["--load-dtype", "bf16", "--liger"]
    em = render(VARIANTS["fsdp"], "c.yaml", ["--max-steps", "5"])
    assert shlex.split(em.launch_command)[-2:] == ["--max-steps", "5"]


def test_launch_flags():
    assert "--enable_cpu_affinity" in render(VARIANTS["fsdp"], "c.yaml").launch_command  # ids 0..3
    assert "--enable_cpu_affinity" not in render(VARIANTS["ddp_multi"], "c.yaml").launch_command  # ids 4..7
    assert "--enable_cpu_affinity" not in render(VARIANTS["hsdp"], "c.yaml").launch_command  # reordered
    assert "--enable_cpu_affinity" not in render(VARIANTS["ddp_1gpu"], "c.yaml").launch_command
    mn = shlex.split(render(VARIANTS["multi_node_hsdp"], "c.yaml").launch_command)
    assert mn[5:11] == ["--rdzv_backend", "static", "--same_network", "--machine_rank", "0", "--enable_cpu_affinity"]
    assert "--rdzv_backend" not in render(VARIANTS["fsdp"], "c.yaml").launch_command


def test_consumer_cards_get_the_nccl_hint():
    plan = replace(VARIANTS["lora_ddp"], gpu_name="NVIDIA GeForce RTX 4090")
    em = render(plan, "c.yaml")
    assert em.env == {"NCCL_P2P_DISABLE": "1"}
    assert em.launch_command.startswith("CUDA_DEVICE_ORDER=PCI_BUS_ID NCCL_P2P_DISABLE=1 accelerate launch ")
    assert render(VARIANTS["lora_ddp"], "c.yaml").env == {}


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (dict(gpu_ids=(0, 0)), ValueError),
        (dict(gpu_ids=()), ValueError),
        (dict(global_batch=7), ValueError),
        (dict(strategy="ddp_plus"), ValueError),
        (dict(machine_rank=2), ValueError),
        (dict(strategy="hsdp", hsdp_replicate=2, hsdp_shard=1), ValueError),
        (dict(strategy="hsdp", hsdp_replicate=3, hsdp_shard=2), ValueError),
        (dict(num_machines=2, global_batch=32), UserError),  # no main_process_ip
    ],
)
def test_inconsistent_plans_are_refused(change, error):
    with pytest.raises(error):
        render(replace(VARIANTS["ddp_multi"], **change), "c.yaml")


def test_hsdp_groups_must_align_with_machines():
    plan = make_plan("hsdp", gpu_ids=(0, 1, 2, 3, 4, 5), hsdp_replicate=2, hsdp_shard=3)
    render(plan, "c.yaml")
    with pytest.raises(ValueError, match="align"):
        render(replace(plan, hsdp_replicate=3, hsdp_shard=2, gpu_ids=(0, 1, 2), num_machines=2, global_batch=24,
                       main_process_ip="10.0.0.1"), "c.yaml")  # fmt: skip


def test_gpu_count_check_is_independent_of_the_plan_property():
    bad = dict(accelerate_yaml.accelerate_dict(VARIANTS["fsdp"]), num_processes=8)
    with pytest.raises(ValueError, match="gpu_ids"):
        accelerate_yaml._check_counts(bad)


def test_write_is_all_or_nothing(tmp_path, monkeypatch):
    em = render(VARIANTS["zero3_hpz"], str(tmp_path / "c.yaml"))
    yaml_path, json_path = tmp_path / "c.yaml", tmp_path / "c.ds.json"
    json_path.write_text("old")
    with pytest.raises(UserError, match="already exists"):
        write(em, force=False)
    assert not yaml_path.exists() and json_path.read_text() == "old"
    assert write(em, force=True) == [json_path, yaml_path]  # YAML last: it never points at a missing JSON
    assert yaml_path.read_text() == em.files[str(yaml_path)]
    # a failure on the second file removes the first one this call created
    other = render(VARIANTS["zero3_hpz"], str(tmp_path / "d.yaml"))
    calls = []

    def flaky(path, text, force=False):
        calls.append(path)
        if len(calls) == 2:
            raise OSError("disk full")
        return real(path, text, force)

    real = emit.atomic_write
    monkeypatch.setattr(emit, "atomic_write", flaky)
    with pytest.raises(OSError):
        write(other, force=False)
    assert not (tmp_path / "d.ds.json").exists() and not (tmp_path / "d.yaml").exists()
