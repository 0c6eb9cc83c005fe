"""Numerics parity across the dial, on the committed GPU measurements (bench/results/, benchmark matrix): every
strategy trained the same data from the same seed, so their per-step losses must agree.

Tolerance: |a - b| <= 0.05 + 2% of the loss. DDP computes in bf16 from fp32 weights under autocast, FSDP2 from
bf16-gathered parameters, DeepSpeed from its bf16 module, and bf16 matmuls round differently in each (and reduce in
another order): on 2x H200 FSDP2, FSDP2 no-reshard and ZeRO-1/2 stayed within 0.067 of DDP over 20 steps of
Mistral-7B at seq 1024 and 4096 (worst at 31% of the tolerance), while a genuinely different update (a lost or
delayed step at lr 1e-5) moves the loss by more than 1 early on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"


def _is_matrix(data: dict) -> bool:
    """bench/run_matrix.py files (the sweep's cells name a script and run one strategy each: no parity groups)."""
    return "cells" in data and not all("script" in c for c in data["cells"].values())


MATRICES = sorted(p for p in RESULTS.glob("*.json") if _is_matrix(json.loads(p.read_text())))
# Rows a later measurement of the same cells replaces: DeepSpeed in the first matrix ran before train.py rounded
# --init random weights to the bf16 grid (its masters, built from its bf16 module, then trailed DDP/FSDP2 early on);
# the bf16init rerun of the same cells is the one compared.
SUPERSEDED = {("h200-x2-2026-11-30.json", s): "h200-x2-2026-11-30-bf16init.json" for s in ("zero1", "zero2", "zero3")}
# Known disagreements in the measurements compared, by file and strategy, with the cause. Strict: a row listed here
# that agrees fails, so a marker cannot outlive its cause.
KNOWN = {
    # zero.Init drew other random weights (loss 11.02 vs 11.17 at step 1); train.py now builds a ZeRO-3 random init
    # outside zero.Init, not yet rerun on GPU.
    ("h200-x2-2026-11-30-bf16init.json", "zero3"): "ZeRO-3 started from another random init (zero.Init)",
}


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
                if ref and key != ref and strategy in family and (path.name, strategy) not in SUPERSEDED:
                    reason = KNOWN.get((path.name, strategy))
                    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
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


def test_superseded_rows_were_rerun():
    """A superseded row is dropped only because its replacement holds the same strategy's rows."""
    for (old, strategy), new in SUPERSEDED.items():
        cells = json.loads((RESULTS / new).read_text())["cells"].values()
        assert (RESULTS / old).is_file() and any(c["strategy"] == strategy and c["status"] == "ok" for c in cells)


def test_there_is_something_to_compare():
    assert MATRICES and any(len(g) > 1 for p in MATRICES for g in _groups(p).values())
