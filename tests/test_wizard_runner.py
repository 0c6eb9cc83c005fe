"""The question runner driven by real key presses through prompt_toolkit pipe input (no questionary mocks)."""

from __future__ import annotations

import pytest
from prompt_toolkit.application import create_app_session
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from generator.wizard import questions as q
from generator.wizard.runner import QuestionSpec, run_questions

DOWN, ENTER, CTRL_C = "\x1b[B", "\r", "\x03"


def drive(keys: list[str], specs, answers=None):
    """Run the questions with `keys` typed one prompt at a time."""
    with create_pipe_input() as pipe, create_app_session(input=pipe, output=DummyOutput()):
        pipe.send_text("".join(keys))
        return run_questions(specs, answers)


SPECS = (
    QuestionSpec("colour", "select", "Colour?", lambda a: [("Red", "r"), ("Green", "g"), ("Blue", "b")], default="r"),
    QuestionSpec("n", "text", "How many?", default="4", validate=q.positive_int, parse=int),
    QuestionSpec("sure", "confirm", "Sure?", default=False, when=lambda a: a["n"] > 3),
    QuestionSpec("name", "autocomplete", "Name?", lambda a: ["alpha", "beta"], validate=lambda t: bool(t)),
)


def test_select_text_confirm_autocomplete_by_keys():
    got = drive([DOWN + ENTER, ENTER, "y", "beta" + ENTER], SPECS)
    assert got == {"colour": "g", "n": 4, "sure": True, "name": "beta"}


def test_when_skips_a_question_and_validation_blocks_bad_text():
    # "0" is refused (stays on the prompt), backspace + "2" is accepted; n=2 skips the confirm.
    got = drive([ENTER, "\x7f" + "0" + ENTER + "\x7f" + "2" + ENTER, "alpha" + ENTER], SPECS)
    assert got == {"colour": "r", "n": 2, "name": "alpha"}


def test_ctrl_c_raises_keyboard_interrupt():
    with pytest.raises(KeyboardInterrupt):
        drive([DOWN + ENTER, CTRL_C], SPECS)


def test_request_from_answers_single_and_multi_node():
    base = {"method": "lora", "seq_len": 2048, "micro_batch": None, "global_batch": 64, "num_machines": 1}
    r = q.request_from_answers(base)
    assert (r.method, r.seq_len, r.micro_batch, r.global_batch, r.num_machines) == ("lora", 2048, None, 64, 1)
    assert r.precision == "auto"  # unasked (QLoRA, or a GPU without fp8): the planner resolves it
    assert q.request_from_answers({**base, "method": "full", "precision": "fp8"}).precision == "fp8"
    multi = {**base, "num_machines": 2, "machine_rank": 1, "main_process_ip": "10.0.0.2", "fabric": "measured"}
    r = q.request_from_answers({**multi, "inter_node_gbps": 42.0})
    assert (r.num_machines, r.machine_rank, r.main_process_ip, r.inter_node_gbps, r.fabric) == (
        2, 1, "10.0.0.2", 42.0, None,
    )  # fmt: skip


def test_validators():
    assert q.positive_int("3") is True and q.positive_int("0") != True and q.positive_int("x") != True  # noqa: E712
    assert q.auto_or_positive_int("auto") is True and q.auto_or_positive_int("-1") is not True
    assert q.positive_number("12.5") is True and q.positive_number("abc") is not True
