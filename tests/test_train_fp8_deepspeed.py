"""train.py --precision fp8 under a DeepSpeed launch config is refused in one line before any model loads (its
torchao path is not built for DeepSpeed engines); the planner refuses to write that combination (plan.precision)."""

from __future__ import annotations

import pytest

from generator.errors import UserError
from training.precision import check_fp8


def test_check_fp8_refuses_a_deepspeed_launch_on_cpu(monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    with pytest.raises(UserError, match=r"does not run under DeepSpeed") as err:
        check_fp8("full")
    assert len(str(err.value).splitlines()) == 1 and "--precision bf16" in str(err.value)


def test_check_fp8_gets_past_the_deepspeed_rule_without_it(monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "false")
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(UserError) as err:  # the next refusal on a CPU machine: torchao or no CUDA GPU
        check_fp8("lora")
    assert "DeepSpeed" not in str(err.value)
