"""`check` agrees with `plan` (issue 19 item 10): a config the generator wrote for machine M passes `check --machine M`
with no warning or error; sharding over slow links is judged by the estimator's own comparison, HSDP by its shard
groups; the workload check assumed is said in one line, and --grad-checkpointing reaches the memory check."""

import json
import re
from pathlib import Path

import pytest

from generator.check import CheckContext, run_rules
from generator.cli import main
from generator.estimate.types import Workload
from generator.model import load_model
from generator.topology import load_topology

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted(
    p.relative_to(ROOT).as_posix()
    for p in [*ROOT.glob("accelerate_configs/*.yaml"), *ROOT.glob("recipes/*/config*.yaml")]
)


def check_json(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["check", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_the_committed_configs_include_each_kind():
    text = "".join((ROOT / p).read_text() for p in COMMITTED)
    assert len(COMMITTED) >= 10 and "recipes/trl-sft/config-full.yaml" in COMMITTED
    assert "dp_replicate_size" in text and "zero_stage: 3" in text  # HSDP and ZeRO-3 are both covered


@pytest.mark.parametrize("path", COMMITTED)
def test_a_config_plan_wrote_passes_check_on_its_own_machine(path, capsys, monkeypatch):
    """On the machine and for the script its header names. check's own default script is `custom`, the safe side: a
    config planned near the card's edge for train.py rightly warns there (test below), so it is not asked here."""
    monkeypatch.chdir(ROOT)
    text = (ROOT / path).read_text()
    machine = re.search(r"^# Machine: machine:([\w-]+);", text, re.M).group(1)
    script = re.search(r"^# Script assumed: ([\w.]+) ", text, re.M).group(1)
    code, doc = check_json(capsys, path, "--machine", machine, "--script", script)
    problems = [f"{f['severity']} {f['key']}: {f['problem']}" for f in doc["findings"] if f["severity"] != "info"]
    assert (code, problems) == (0, [])
    assert doc["assumed"].startswith("assumed (from the config's header)")


def ctx(machine: str, **workload) -> CheckContext:
    return CheckContext(
        topo=load_topology(machine=machine), model=load_model("mistral-7b"), workload=Workload(**workload)
    )


FSDP8 = {
    "distributed_type": "FSDP",
    "num_processes": 8,
    "gpu_ids": "0,1,2,3,4,5,6,7",
    "fsdp_config": {"fsdp_version": 2, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP"},
}


def sharding(cfg, context):
    return [f for f in run_rules(cfg, context) if f.rule == "sharding_over_pcie"]


def test_sharding_over_pcie_is_judged_by_the_estimator():
    # LoRA leaves room for an unsharded strategy that the estimator predicts faster over PCIe: say which, with numbers
    [f] = sharding(FSDP8, ctx("pcie-l40s-8", method="lora"))
    assert re.search(r"zero\d|ddp", f.fix) and "predicted" in f.problem and "% faster than fsdp" in f.problem
    # a full fine-tune at micro-batch 4 leaves no unsharded strategy that fits: sharding is what memory needs
    zero3 = {**FSDP8, "distributed_type": "DEEPSPEED", "deepspeed_config": {"zero_stage": 3}}
    assert sharding(zero3, ctx("pcie-l40s-8", micro_batch=4)) == []


def test_fsdp_across_two_islands_names_island_sized_hsdp_from_the_estimate():
    [f] = sharding(FSDP8, ctx("h200-nvl-8"))
    assert f.problem.split("; ")[1].startswith("hsdp fits this job")
    assert "dp_shard_size 4" in f.fix and "dp_replicate_size 2" in f.fix


def test_hsdp_with_island_shard_groups_is_not_said_to_gather_across_islands():
    hsdp = {
        **FSDP8,
        "parallelism_config": {"parallelism_config_dp_replicate_size": 2, "parallelism_config_dp_shard_size": 4},
    }
    found = run_rules(hsdp, ctx("h200-nvl-8"))
    assert [f for f in found if f.severity != "info"] == []
    assert not any("all-gathers every layer" in f.problem for f in found)


def test_grad_checkpointing_flag_reaches_the_memory_check_and_the_assumed_line(capsys):
    cfg = str(ROOT / "tests/fixtures/configs/fsdp2_clean.yaml")
    common = ["--machine", "h200-sxm-2", "--model", "mistral-7b", "--micro-batch", "2"]
    _, on = check_json(capsys, cfg, *common, "--grad-checkpointing", "on")
    _, off = check_json(capsys, cfg, *common, "--grad-checkpointing", "off")

    def reserved(doc):
        [f] = [f for f in doc["findings"] if f["rule"] == "memory_fit"]
        return float(re.search(r"predicted ([\d.]+) GB reserved", f["problem"]).group(1))

    assert reserved(off) > reserved(on) + 5  # the saved activations of every layer
    assert off["assumed"].startswith("assumed (defaults, --micro-batch, --grad-checkpointing from the command line)")
    assert "checkpointing off" in off["assumed"] and "checkpointing on" in on["assumed"]
    assert main(["check", cfg, "--grad-checkpointing", "maybe"]) == 2


@pytest.mark.parametrize("script", ["trainer", "custom"])
def test_check_reads_a_script_config_back_as_the_plan_priced_it(script, tmp_path, capsys):
    """A config `plan --script S` wrote passes `check --script S` on its machine, and check's workload is the plan's:
    the same levers, LoRA targets and dropout (TRL's line is read back in TRL's own flags)."""
    from generator.check.written_for import written_for

    out = tmp_path / "c.yaml"
    assert main(["plan", "--machine", "h200-sxm-2", "--model", "mistral-7b", "--method", "lora", "--script", script,
                 "--output", str(out), "--json"]) == 0  # fmt: skip
    plan = json.loads(capsys.readouterr().out)
    _, w = written_for(out.read_text())
    assert (w.script, w.micro_batch, w.grad_accum, w.grad_checkpointing) == (
        script,
        plan["micro_batch"],
        plan["gradient_accumulation_steps"],
        plan["grad_checkpointing"],
    )
    assert w.lora_targets == ("q", "v") and w.lora_dropout == (0.05 if script == "trainer" else 0.0)
    assert w.attention == ("flex" if "flex_attention" in plan["launch_command"] else "sdpa")
    code, doc = check_json(capsys, str(out), "--machine", "h200-sxm-2", "--script", script)
    assert code == 0, doc["findings"]


def test_check_under_another_script_drops_the_levers_it_cannot_pull(tmp_path, capsys):
    """A train.py config with float8 and flex, checked as a TRL or plain-loop launch, is judged in bf16 and, for the
    plain loop, with SDPA: the other script is not credited train.py's levers."""
    out = tmp_path / "t.yaml"
    assert main(["plan", "--machine", "h200-sxm-2", "--model", "mistral-7b", "--method", "lora", "--precision", "fp8",
                 "--attention", "flex", "--output", str(out)]) == 0  # fmt: skip
    capsys.readouterr()
    for script in ("trainer", "custom"):
        _, doc = check_json(capsys, str(out), "--machine", "h200-sxm-2", "--script", script)
        assert f"--script {script}" in doc["assumed"] and "fp8" not in doc["assumed"]
    from argparse import Namespace

    from generator.check.written_for import written_for
    from generator.commands.check import _workloads

    header = written_for(out.read_text())
    base = Namespace(seq_len=None, micro_batch=None, method=None, grad_checkpointing=None, precision=None,
                     lora_targets=None)  # fmt: skip
    for script, attention in (("trainer", "flex"), ("custom", "sdpa")):
        checked, planned = _workloads(Namespace(**vars(base), script=script), header)
        assert (planned.precision, checked.precision, checked.attention) == ("fp8", "bf16", attention)
    assert main(["check", str(out), "--script", "trainer", "--precision", "fp8"]) == 2
