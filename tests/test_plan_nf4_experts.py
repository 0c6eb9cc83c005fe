"""The launch-bound caveat for train.py's 4-bit experts: the plan says it where a micro-step is as short as the one
measured launch-bound, not where it was measured GPU-bound nor for models without experts, and the measurement it
cites is the one in bench/results, priced by this estimator."""

from __future__ import annotations

import json

import pytest

from bench.calibration import predict
from bench.results_rows import load_files, load_rows
from generator.cli import main
from generator.plan.model_reasons import NF4_EXPERTS_LAUNCH_BOUND

SOURCE = "h200-x1-families-mixtral-sorted-2026-12-04.json"


def _why(capsys, tmp_path, model: str, micro_batch: int, method: str = "qlora") -> list[str]:
    argv = ["plan", "--model", model, "--machine", "h200-sxm-2", "--num-gpus", "1", "--method", method,
            "--seq-len", "4096", "--micro-batch", str(micro_batch), "--global-batch", str(micro_batch),
            "--grad-checkpointing", "on", "--output", str(tmp_path / "c.yaml"), "--force", "--json"]  # fmt: skip
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)["reasons"]


def _caveats(why: list[str]) -> list[str]:
    return [line for line in why if line.startswith("launch-bound risk")]


@pytest.mark.parametrize(("model", "micro_batch", "method", "said"), [
    ("mixtral-8x7b", 1, "qlora", True),
    ("mixtral-8x7b", 4, "qlora", True),
    ("mixtral-8x7b", 8, "qlora", False),  # measured GPU-bound there
    ("mixtral-8x7b", 1, "lora", False),  # bf16 experts: grouped GEMMs, no host read a layer
    ("mistral-7b", 1, "qlora", False),  # no experts
])  # fmt: skip
def test_the_caveat_appears_where_the_micro_step_is_as_short_as_the_launch_bound_row(
    capsys, tmp_path, model, micro_batch, method, said
):
    lines = _caveats(_why(capsys, tmp_path, model, micro_batch, method))
    assert len(lines) == int(said)
    if said:
        assert f"at {4096 * micro_batch:,} expect" in lines[0]


def test_the_cited_row_is_the_measured_one_and_this_estimator_still_predicts_what_the_caveat_says():
    slow, measured, predicted, fine = NF4_EXPERTS_LAUNCH_BOUND
    rows = {(r.micro_batch * r.seq_len, r.source): r for r in load_rows(load_files()) if r.model == "mixtral-8x7b"}
    low, high = rows[(slow, SOURCE)], rows[(fine, SOURCE)]
    assert round(low.tps) == measured
    # the caveat quotes the estimator's prediction: a change to the estimator must update it (within 1%)
    assert abs(predict(low, {}).tokens_per_s_per_gpu / predicted - 1) < 0.01
    assert abs(predict(high, {}).tokens_per_s_per_gpu / high.tps - 1) < 0.03
