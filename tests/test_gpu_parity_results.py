"""Numerics parity across the dial, on the committed GPU measurements (bench/results/, benchmark matrix): every
strategy trained the same data from the same seed, so their per-step losses must agree.

Tolerance: |a - b| <= 0.05 + 2% of the loss. DDP computes in bf16 from fp32 weights under autocast, FSDP2 from
bf16-gathered parameters, and bf16 matmuls round differently in the two (and reduce in another order): on 2x H200
the three torch-native variants stayed within 0.024 of DDP over 20 steps of Mistral-7B at seq 4096, while a
genuinely different update (a lost or delayed step at lr 1e-5) moves the loss by more than 1 early on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
MATRICES = sorted(p for p in RESULTS.glob("*.json") if "cells" in json.loads(p.read_text()))
# Measured before train.py rounded --init random weights to the bf16 grid: DeepSpeed (masters built from its bf16
# module) trailed DDP/FSDP2 early on. Strict: once a rerun agrees, this marker must go.
DEEPSPEED_TRAILED = {"h200-x2-2026-11-30.json"}


def _agree(a: list[float], b: list[float]) -> list[int]:
    """Steps (1-based) where two loss curves disagree beyond the tolerance."""
    return [i + 1 for i, (x, y) in enumerate(zip(a, b, strict=False)) if abs(x - y) > 0.05 + 0.02 * abs(x)]


def _groups(path: Path) -> dict[tuple, dict[str, list[float]]]:
    """Full fine-tunes of the same GPUs, sequence length and micro-batch: strategy/ckpt label -> losses."""
    out: dict[tuple, dict[str, list[float]]] = {}
    for key, c in json.loads(path.read_text())["cells"].items():
        if c.get("status") == "ok" and c["method"] == "full" and not c.get("variant"):
            out.setdefault((c["gpus"], c["seq_len"], c["micro_batch"]), {})[key] = c["measured"]["losses"]
    return out


def _cases(family: tuple[str, ...]):
    for path in MATRICES:
        for curves in _groups(path).values():
            ref = next((k for k in curves if "-ddp-" in k), None)
            for key in curves:
                strategy = key.split("-")[1]
                if ref and key != ref and strategy in family:
                    marks = []
                    if family[0].startswith("zero") and path.name in DEEPSPEED_TRAILED:
                        marks = [pytest.mark.xfail(strict=True, reason="DeepSpeed trailed before the bf16-grid init")]
                    yield pytest.param(path.name, ref, key, marks=marks, id=f"{path.name}:{key}")


@pytest.mark.parametrize(("source", "ref", "key"), list(_cases(("fsdp", "fsdp_grad_op"))))
def test_fsdp2_losses_follow_ddp(source, ref, key):
    curves = _groups(RESULTS / source)
    group = next(g for g in curves.values() if key in g)
    assert len(group[key]) >= 20 and not _agree(group[ref], group[key]), (group[ref], group[key])


@pytest.mark.parametrize(("source", "ref", "key"), list(_cases(("zero1", "zero2", "zero3"))))
def test_deepspeed_losses_follow_ddp(source, ref, key):
    curves = _groups(RESULTS / source)
    group = next(g for g in curves.values() if key in g)
    assert not _agree(group[ref], group[key]), (group[ref], group[key])


def test_there_is_something_to_compare():
    assert MATRICES and any(len(g) > 1 for p in MATRICES for g in _groups(p).values())
