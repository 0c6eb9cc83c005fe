"""The bench's SFTTrainer script (bench/scripts/trl_sft.py) under an FSDP config that checkpoints: Trainer refuses its
own checkpointing on top (the exit 2 of the first FSDP2 run on one H200), so the script must leave it to FSDP."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SFT = Path(__file__).resolve().parents[1] / "bench" / "scripts" / "trl_sft.py"


@pytest.fixture
def sft():
    spec = importlib.util.spec_from_file_location("sft_recipe", SFT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("fsdp", "ckpt", "expected"), [("true", "true", True), ("true", "false", False), ("", "true", False)]
)
def test_checkpointing_is_left_to_fsdp_only_when_its_config_does_it(sft, monkeypatch, fsdp, ckpt, expected):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", fsdp)
    monkeypatch.setenv("FSDP_ACTIVATION_CHECKPOINTING", ckpt)
    assert sft.fsdp_checkpoints() is expected
