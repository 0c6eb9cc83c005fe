"""The whole wizard (`python -m generator` with no verb) driven by real key presses through prompt_toolkit pipe input:
real questionary prompts, real planner and emitter; only live GPU detection is pinned to "no GPU here"."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from prompt_toolkit.application import create_app_session
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from generator.cli import main
from generator.topology import REFERENCE_MACHINES
from generator.wizard import flow

DOWN, UP, ENTER, CTRL_C, BACKSPACE = "\x1b[B", "\x1b[A", "\r", "\x03", "\x7f"
ROOT = Path(__file__).resolve().parents[1]
REAL_DETECT_LIVE = flow.detect_live  # before the autouse fixture pins it to "no GPU"


@pytest.fixture(autouse=True)
def no_live_gpu(monkeypatch, tmp_path):
    monkeypatch.setattr(flow, "detect_live", lambda: None)
    monkeypatch.chdir(tmp_path)


def machine(name: str) -> str:
    assert name in REFERENCE_MACHINES
    return name + ENTER  # typing filters the list down to the match


def replace_text(old: str, new: str) -> str:
    return BACKSPACE * len(old) + new + ENTER


def wizard(keys: list[str]) -> int:
    with create_pipe_input() as pipe, create_app_session(input=pipe, output=DummyOutput()):
        pipe.send_text("".join(keys))
        pipe.close()  # a prompt the keys do not answer hits end-of-input and fails the test instead of hanging CI
        return main([])


# machine, model, method, seq len, micro-batch, global batch, kernels (the planner's pick), document length, script,
# machines, precision (asked on this fp8 GPU for a full fine-tune that fits: bf16, the first choice; the cursor starts
# on the recommended one, float8 here)
SETUP = [machine("hgx-h200-8"), ENTER, ENTER, ENTER, ENTER, replace_text("auto", "64"), ENTER, ENTER, ENTER, ENTER]
SETUP += [UP + ENTER]
# ... for Llama-2-13B, whose full fine-tune DDP cannot hold on one H200 (Mistral-7B's can since the compiled layers
# train.py's plan takes hold no weight copies at the loss: tests/test_estimate_compiled_casts.py)
SETUP_BIG = [SETUP[0], replace_text("mistral-7b", "llama-2-13b"), *SETUP[2:]]


def test_accept_writes_the_config_and_prints_the_launch_command(tmp_path, capsys):
    assert wizard([*SETUP, ENTER, ENTER]) == 0  # accept, default path
    out = capsys.readouterr().out
    cfg = tmp_path / "accelerate_config.yaml"
    assert cfg.exists() and "accelerate launch --config_file accelerate_config.yaml" in out
    data = yaml.safe_load(cfg.read_text())
    assert data["num_processes"] >= 1


def test_override_strategy_and_refuse_overwrite(tmp_path, capsys):
    (tmp_path / "accelerate_config.yaml").write_text("mine\n")
    # review -> "Choose another strategy" -> type "zero2" (filters; zero2 is the first match) -> review -> accept
    # -> default path exists -> "n" -> new name
    new_name = replace_text("accelerate_config.yaml", "z2.yaml")
    keys = [*SETUP, DOWN + ENTER, "zero2" + ENTER, ENTER, ENTER, "n", new_name]
    assert wizard(keys) == 0
    assert (tmp_path / "accelerate_config.yaml").read_text() == "mine\n"
    assert yaml.safe_load((tmp_path / "z2.yaml").read_text())["distributed_type"] == "DEEPSPEED"


def test_nothing_fits_offers_lora_on_the_consumer_machine(tmp_path, capsys):
    keys = [machine("rtx4090-2"), *[ENTER] * 12]  # model .. machines (defaults), then the rescue
    assert wizard(keys) == 0  # rescue: LoRA (default) -> accept -> default path
    out = capsys.readouterr().out
    assert "does not fit" in out and "What would fit: LoRA (" in " ".join(out.split())
    assert (tmp_path / "accelerate_config.yaml").exists()


@pytest.mark.parametrize("at", [0, 1, 3, 6, len(SETUP) - 1, len(SETUP), len(SETUP) + 1])  # -1: precision
def test_ctrl_c_anywhere_leaves_nothing_behind(tmp_path, capsys, at):
    keys = [*SETUP, ENTER][:at] + [CTRL_C]
    assert wizard(keys) == 130
    assert list(tmp_path.iterdir()) == []
    assert "nothing was written" in capsys.readouterr().err


def test_quit_at_review_writes_nothing(tmp_path):
    assert wizard([*SETUP, "Quit" + ENTER]) == 0  # typing filters the menu down to the match
    assert list(tmp_path.iterdir()) == []


def test_topology_file_and_multi_node_answers_reach_the_config(tmp_path, capsys):
    src = ROOT / "generator" / "machines"
    (tmp_path / "box.txt").write_text((src / "h200-sxm-2.txt").read_text())
    (tmp_path / "box.json").write_text((src / "h200-sxm-2.json").read_text())
    keys = [
        "A topology" + ENTER, str(tmp_path / "box.txt") + ENTER,  # machine: a file, then its path
        ENTER, ENTER, ENTER, ENTER, ENTER, ENTER, ENTER, ENTER,  # model .. global batch, kernels, documents, script
        replace_text("1", "2"), "10.0.0.1" + ENTER, replace_text("29500", "29611"), ENTER,  # 2 machines, ip, port, rank
        "ib-ndr-x8" + ENTER,  # fabric
        ENTER, ENTER, ENTER,  # precision bf16, accept, default path
    ]  # fmt: skip
    assert wizard(keys) == 0
    data = yaml.safe_load((tmp_path / "accelerate_config.yaml").read_text())
    assert (data["num_machines"], data["num_processes"], data["main_process_ip"]) == (2, 4, "10.0.0.1")
    assert data["main_process_port"] == 29611
    assert "--machine_rank 0" in capsys.readouterr().out.replace("=", " ")


def test_unknown_or_unreachable_model_is_refused_at_its_prompt(tmp_path, monkeypatch, capsys):
    """The model prompt itself refuses an unknown name and a hub id the (offline) hub cannot give, and asks again:
    the keys after each refusal are typed into the same prompt, not into the questions after it."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    keys = [machine("hgx-h200-8"), replace_text("mistral-7b", "nonexistent"), replace_text("nonexistent", "someorg/x")]
    keys += [replace_text("someorg/x", "mistral-7b"), *[ENTER] * 9, ENTER, ENTER]  # method .. precision, accept, path
    assert wizard(keys) == 0
    assert "unknown model" not in capsys.readouterr().out  # not reported after all the questions
    assert "mistral-7b" in (tmp_path / "accelerate_config.yaml").read_text()


def test_the_model_and_topology_validators_say_what_is_wrong(tmp_path, monkeypatch):
    from generator.wizard import validators as v

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert v.known_model("mistral-7b") is True
    assert "unknown model 'nonexistent'" in v.known_model("nonexistent")
    assert "hub is offline" in v.known_model("someorg/x")
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)) * 8)
    assert "binary" in v.readable_topology(str(tmp_path / "blob.bin"))
    assert v.readable_topology(str(tmp_path / "missing.txt")) == "no such file"
    assert v.readable_topology(str(ROOT / "generator" / "machines" / "h200-sxm-2.txt")) is True


def test_a_binary_topology_file_is_refused_at_its_prompt(tmp_path, capsys):
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)) * 8)
    good = str(ROOT / "generator" / "machines" / "h200-sxm-2.txt")
    keys = ["A topology" + ENTER, "blob.bin" + ENTER, replace_text("blob.bin", good)]  # refused, then a real one
    keys += [*[ENTER] * 10, ENTER, ENTER]  # model .. machines, precision, accept, default path
    assert wizard(keys) == 0
    assert "binary" not in capsys.readouterr().out  # refused at the prompt, not after every question
    assert yaml.safe_load((tmp_path / "accelerate_config.yaml").read_text())["num_processes"] == 2


def test_a_strategy_that_does_not_fit_needs_a_second_yes(tmp_path, capsys):
    # review -> strategy "ddp" (does not fit a full fine-tune) -> accept -> "write anyway?" n -> back to review
    # -> accept -> y -> default path
    keys = [*SETUP_BIG, DOWN + ENTER, "ddp" + ENTER, ENTER, "n", ENTER, "y", ENTER]
    assert wizard(keys) == 0
    text = (tmp_path / "accelerate_config.yaml").read_text()
    assert yaml.safe_load(text)["distributed_type"] == "MULTI_GPU"
    assert "does not fit" in capsys.readouterr().out


def test_without_a_gpu_the_reference_fallback_is_not_offered_as_this_machine():
    live = REAL_DETECT_LIVE()
    assert live is None or live.source in ("nvml", "nvidia-smi")


def test_a_detected_machine_is_the_default_answer(tmp_path, monkeypatch, capsys):
    from dataclasses import replace

    from generator.topology import load_topology

    live = replace(load_topology(machine="h200-sxm-2"), source="nvml")
    monkeypatch.setattr(flow, "detect_live", lambda: live)
    assert wizard([ENTER, *SETUP[1:], ENTER, ENTER, ENTER]) == 0  # + "run a short trial?" (default no) on a GPU
    data = yaml.safe_load((tmp_path / "accelerate_config.yaml").read_text())
    assert data["num_processes"] == 2 and "Machine: nvml" in (tmp_path / "accelerate_config.yaml").read_text()


def test_the_kernels_default_is_the_planners_pick(tmp_path, capsys):
    """Enter at the kernels question leaves attention to the planner: flex at a long sequence, as `plan` picks."""
    keys = [machine("h200-sxm-2"), ENTER, DOWN + ENTER, replace_text("4096", "32768"), ENTER, ENTER]  # LoRA, s32768
    keys += [ENTER] * 8  # train.py, LoRA targets: its default, kernels: the planner's pick, documents fill, 1 machine,
    # precision, accept, path
    assert wizard(keys) == 0
    assert "--attn-implementation flex_attention" in capsys.readouterr().out


def test_liger_and_flex_reach_the_launch_command_with_the_document_length(tmp_path, capsys):
    keys = [machine("h200-sxm-2"), ENTER, ENTER, ENTER, ENTER, replace_text("auto", "64"), ENTER]  # ..., train.py
    keys += [DOWN * 3 + ENTER, replace_text("auto", "300")]  # Liger + flex, 300 tokens
    keys += [ENTER] * 4  # 1 machine, precision bf16, accept, default path
    assert wizard(keys) == 0
    out = capsys.readouterr().out
    assert "--liger" in out and "--attn-implementation flex_attention" in out
    assert (tmp_path / "accelerate_config.yaml").exists()


def test_script_answer_reaches_the_header_and_the_estimate(tmp_path, capsys):
    # machine, model, method, seq len, micro-batch, global batch, script: "My own Accelerate loop", its path, kernels:
    # the loop's SDPA (a plain loop's kernels are what it declares; no documents question, no precision question:
    # it has no float8 path)
    keys = [machine("h200-sxm-2"), ENTER, ENTER, ENTER, ENTER, replace_text("auto", "64"), DOWN * 2 + ENTER]
    keys += [replace_text("", "my_loop.py"), ENTER]
    assert wizard([*keys, ENTER, ENTER, ENTER]) == 0  # machines, accept, default path
    header = (tmp_path / "accelerate_config.yaml").read_text()
    assert "# Script assumed: custom (plain Accelerate loop: torch.optim.AdamW defaults (foreach)" in header
    out = capsys.readouterr().out
    launch = out.split("accelerate launch --config_file accelerate_config.yaml", 1)[1].split("\n", 1)[0]
    assert launch.split()[-1] == "my_loop.py"
    assert "Your loop must use" in header and "attn_implementation='sdpa'" in header


def test_nothing_fits_on_a_batch_that_does_not_split_offers_batches_that_do(tmp_path, capsys):
    # rtx4090-2, QLoRA, global batch 3: planned on 1 GPU (3 does not split over 2) with a warning saying so;
    # "Choose the number of GPUs" -> 2 -> nothing fits -> the rescue's first choice is a batch that splits.
    setup = [
        machine("rtx4090-2"),
        ENTER,
        DOWN + DOWN + ENTER,
        ENTER,
        ENTER,
        replace_text("auto", "3"),
        ENTER,  # train.py
        ENTER,  # LoRA targets: the script's default
        ENTER,  # kernels
        ENTER,  # documents
        ENTER,  # one machine
    ]
    keys = [*setup, DOWN + DOWN + ENTER, DOWN + DOWN + ENTER, ENTER, ENTER, ENTER]
    assert wizard(keys) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps lines
    assert "use global batch 2 or 4 to use all 2 GPUs" in out
    config = yaml.safe_load((tmp_path / "accelerate_config.yaml").read_text())
    assert config["num_processes"] == 2


def test_rescue_offers_only_changes_that_alter_the_request():
    from generator.plan.types import PlanRequest
    from generator.wizard import review as q

    qlora = PlanRequest(method="qlora", global_batch=3, seq_len=256)
    values = [v for _, v in q.rescue_choices({"_request": qlora, "_gpus": 2, "_split": q.batches_that_split(qlora, 2)})]
    assert values == ["batch:2", "batch:4", "offload", "quit"]
    assert q.batches_that_split(PlanRequest(global_batch=4), 2) == ()


SPACE = " "


def test_chosen_gpu_ids_reach_the_plan_and_the_config(tmp_path, capsys):
    """Review -> "Choose which GPUs": the planner's 8 are ticked; untick GPUs 0-3 -> the plan and the written config
    use GPUs 4-7 only."""
    untick_first_four = (SPACE + DOWN) * 3 + SPACE + ENTER
    keys = [*SETUP, "Choose which" + ENTER, untick_first_four, ENTER, ENTER]  # then accept, default path
    assert wizard(keys) == 0
    data = yaml.safe_load((tmp_path / "accelerate_config.yaml").read_text())
    assert (str(data["gpu_ids"]), data["num_processes"]) == ("4,5,6,7", 4)


def test_unticking_every_gpu_is_refused_at_the_prompt(tmp_path):
    # untick GPUs 0 and 1 of h200-sxm-2 -> Enter is refused -> tick GPU 1 again -> accepted; a full fine-tune does
    # not fit one H200, so the rescue's first choice (LoRA), then accept, default path
    keys = [machine("h200-sxm-2"), *SETUP[1:], "Choose which" + ENTER, SPACE + DOWN + SPACE + ENTER, SPACE + ENTER]
    assert wizard([*keys, ENTER, ENTER, ENTER]) == 0
    data = yaml.safe_load((tmp_path / "accelerate_config.yaml").read_text())
    assert (str(data["gpu_ids"]), data["num_processes"]) == ("1", 1)


def test_gpu_id_validator_and_request():
    from generator.plan.types import PlanRequest
    from generator.wizard import review as q
    from generator.wizard.validators import picked_gpus

    assert "at least one" in picked_gpus([], (0, 1)) and "[5]" in picked_gpus([5], (0, 1))
    assert picked_gpus([1], (0, 1)) is True
    r = q.with_gpu_ids(PlanRequest(exclude=(3,)), (0, 1, 2, 3), [1, 3])
    assert (r.exclude, r.num_gpus) == ((0, 2), 2)


def test_offload_is_a_review_choice_until_allowed():
    from generator.plan.types import PlanRequest
    from generator.wizard import review as q

    assert "offload" in [v for _, v in q.review_choices({"_request": PlanRequest()})]
    assert "offload" not in [v for _, v in q.review_choices({"_request": PlanRequest(allow_offload=True)})]


def test_advice_is_in_the_wizards_words(tmp_path, capsys):
    """The reasons name the wizard's menu choices, never a flag the wizard cannot take: forcing ddp on hgx-h200-8 for
    Llama-2-13B, which does not fit (write anyway, or pick auto), and Mistral-7B's own bf16 plan, whose offload
    strategies are left out unless allowed."""
    keys = [*SETUP_BIG, DOWN + ENTER, "ddp" + ENTER, ENTER, "n", "Quit" + ENTER]
    assert wizard(keys) == 0
    assert wizard([*SETUP, "Quit" + ENTER]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "answer yes to 'Write it anyway?'" in out and "pick 'auto' under 'Choose another strategy'" in out
    assert "Allow ZeRO CPU offload' at 'What now?'" in out
    assert not re.findall(r"(?<![\w-])--[a-z][a-z-]*", out)


@pytest.mark.parametrize(
    ("machine_name", "request_fields"),
    [
        ("h200-nvl-8", {"strategy": "ddp"}),
        ("rtx4090-2", {}),
        ("rtx4090-2", {"method": "qlora", "global_batch": 3}),
        ("hgx-h200-8", {"num_machines": 2}),
        ("h200-sxm-2", {"seq_len": 10_000_000}),
    ],
)
def test_no_advice_shown_in_the_wizard_names_a_flag(machine_name, request_fields):
    from generator.errors import UserError
    from generator.model import load_model
    from generator.plan.planner import make_plan
    from generator.plan.types import PlanRequest
    from generator.topology import load_topology
    from generator.wizard.phrasing import in_wizard_words

    try:
        plan = make_plan(load_topology(machine=machine_name), load_model("mistral-7b"), PlanRequest(**request_fields))
        texts = [*plan.reasons, *plan.warnings]
    except UserError as exc:
        texts = [str(exc)]
    assert any("--" in t for t in texts)  # the planner's own text names flags (what `plan` prints) ...
    assert not [t for t in map(in_wizard_words, texts) if re.search(r"(?<![\w-])--[a-z]", t)]  # ... the wizard's not


def test_the_trial_refusal_names_the_wizards_model_question():
    from generator.trial.loadable import FIX
    from generator.wizard.phrasing import in_wizard_words

    said = in_wizard_words(f"--trial: train.py cannot load the plan's model 'x/y': offline; {FIX}")
    assert "answer 'Model' with a local directory" in said and "--" not in said


def test_fp8_chosen_reaches_the_launch_command_and_the_header(tmp_path, capsys):
    """h200-sxm-2, full fine-tune: the precision question is asked with the cursor on its recommended choice, fp8
    here, which gives train.py --precision fp8 and the header's predicted-only line."""
    assert wizard([machine("h200-sxm-2"), *SETUP[1:-1], ENTER, ENTER, ENTER]) == 0  # fp8, accept, path
    assert "--precision fp8" in capsys.readouterr().out
    assert "Precision: fp8, PREDICTED, NOT MEASURED" in (tmp_path / "accelerate_config.yaml").read_text()


def test_precision_is_not_asked_on_a_gpu_without_fp8(tmp_path, capsys):
    """Four A100s (no fp8 tensor cores), full fine-tune: the keys answer no precision question (one would leave the
    output prompt unanswered), and the plan's lever line says why fp8 is not offered."""
    (tmp_path / "box.txt").write_text((ROOT / "tests/fixtures/topo/a100-pcie-4x-nv12-pairs.txt").read_text())
    (tmp_path / "box.json").write_text('{"gpu_name": "NVIDIA A100 80GB PCIe", "memory_gb": 85.9}')
    keys = ["A topology" + ENTER, "box.txt" + ENTER, *SETUP[1:-1], ENTER, ENTER]  # model .. machines, accept, path
    assert wizard(keys) == 0
    out = capsys.readouterr().out
    assert "--precision" not in out and "fp8 not offered" in " ".join(out.split())
    assert "PREDICTED, NOT MEASURED" not in (tmp_path / "accelerate_config.yaml").read_text()


def test_precision_is_offered_for_full_and_lora_with_auto_s_choice_as_the_default():
    """One H200, full and LoRA: asked, with both precisions' predicted tokens/s; the recommended choice answers auto
    and is fp8 exactly when torchao is importable (auto's rule); QLoRA, and a machine where nothing fits, skip it."""
    from generator.model import load_model
    from generator.plan.planner import make_plan
    from generator.plan.types import PlanRequest
    from generator.topology import load_topology
    from generator.wizard.precision import for_method, fp8_gain, precision_choices

    model, h200 = load_model("mistral-7b"), load_topology(machine="h200-sxm-2")
    for method in ("full", "lora"):
        request = PlanRequest(method=method, num_gpus=1, fp8_installed=True)
        gain = fp8_gain(h200, model, request)
        auto = make_plan(h200, model, request)
        assert gain is not None and gain.default == auto.workload.precision == "fp8"
        assert gain.fp8_tokens_per_s == auto.estimate.tokens_per_s_per_gpu  # the number of the plan it writes
        titles = dict((v, t) for t, v in precision_choices({"_gain": gain}))
        assert set(titles) == {"auto", "bf16"} and "(recommended)" in titles["auto"]
        assert f"{gain.bf16_tokens_per_s:,.0f} tokens/s" in titles["bf16"] and "measured" in titles["auto"]
        absent = fp8_gain(h200, model, replace(request, fp8_installed=False))
        titles = dict((v, t) for t, v in precision_choices({"_gain": absent}))
        assert absent.default == "bf16" and set(titles) == {"auto", "fp8"} and "needs torchao" in titles["fp8"]
    assert fp8_gain(h200, model, PlanRequest(method="qlora", fp8_installed=True)) is None  # train.py refuses it
    assert fp8_gain(load_topology(machine="rtx4090-2"), model, PlanRequest()) is None  # nothing fits in bf16
    assert for_method(PlanRequest(precision="fp8"), "qlora").precision == "auto"  # the rescue's switch to QLoRA
    assert for_method(PlanRequest(precision="fp8"), "lora").precision == "fp8"


def test_trainer_answer_writes_the_config_and_line_plan_writes(tmp_path, capsys):
    """The wizard's script question leads to the same plan as `plan --script trainer`: byte-identical config, TRL's
    launch line with its LoRA default (q_proj, v_proj)."""
    keys = [machine("h200-sxm-2"), ENTER, DOWN + ENTER, ENTER, ENTER, ENTER, DOWN + ENTER]  # LoRA, ..., trainer
    keys += [
        ENTER,
        ENTER,
        ENTER,
        ENTER,
        ENTER,
        ENTER,
        ENTER,
    ]  # TRL's own script, targets, kernels, docs, 1, accept, path
    assert wizard(keys) == 0
    wizard_text = (tmp_path / "accelerate_config.yaml").read_text()
    assert "-m trl.scripts.sft" in wizard_text and "--lora_target_modules q_proj v_proj" in wizard_text
    from generator.cli import main as cli

    assert cli(["plan", "--machine", "h200-sxm-2", "--model", "mistral-7b", "--method", "lora", "--script",
                "trainer", "--output", str(tmp_path / "plan.yaml")]) == 0  # fmt: skip
    plan_text = (tmp_path / "plan.yaml").read_text().replace(str(tmp_path / "plan.yaml"), "accelerate_config.yaml")
    assert plan_text == wizard_text
