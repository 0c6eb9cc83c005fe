"""bench/trl_cli.py's plumbing without a GPU: the printed TRL line with a user's placeholders filled in, the cell keys
holdout.py names, and a results row read back by bench/results_rows.py as the workload TRL ran (its LoRA targets and
dropout, the plan's levers), priced by the estimator."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench import calibration, results_rows
from bench.holdout import TRL_CLI_FIT_KEYS
from bench.trl_cli import CELLS, FIT, VALIDATION, calibration_fields, filled_command, plan_command

ROOT = Path(__file__).resolve().parents[1]


def test_keys_are_unique_and_the_fit_set_is_named_before_any_run():
    keys = [c.key for c in CELLS]
    assert len(set(keys)) == len(keys)
    assert {c.key for c in FIT} == TRL_CLI_FIT_KEYS and not TRL_CLI_FIT_KEYS & {c.key for c in VALIDATION}
    assert len(VALIDATION) >= 8 and {c.method for c in VALIDATION} == {"full", "lora", "qlora"}


def test_filled_command_changes_only_the_placeholders(tmp_path):
    res = subprocess.run(plan_command(VALIDATION[0], tmp_path / "c.yaml"), cwd=ROOT, capture_output=True, text=True)
    plan = json.loads(res.stdout)
    cmd = filled_command(plan["launch_command"], Path("/m"), Path("/d"), 5, Path("/o"))
    printed = plan["launch_command"].split(" -m trl.scripts.sft ", 1)[1].split()
    ran = cmd[cmd.index("trl.scripts.sft") + 1 :]
    changed = {printed[i - 1] for i, (a, b) in enumerate(zip(printed, ran, strict=False)) if a != b}
    assert changed == {"--model_name_or_path", "--dataset_name", "--max_steps", "--output_dir"}
    assert ran[len(printed) :] == ["--logging_steps", "1", "--save_strategy", "no", "--report_to", "none"]


@pytest.mark.parametrize("cell", [FIT[0], VALIDATION[0], VALIDATION[1]], ids=lambda c: c.key)
def test_a_results_row_reads_back_as_the_workload_trl_ran(cell, tmp_path):
    res = subprocess.run(plan_command(cell, tmp_path / "c.yaml"), cwd=ROOT, capture_output=True, text=True)
    plan = json.loads(res.stdout)
    from dataclasses import asdict

    measured = {"peak_allocated_gb": 30.0, "peak_reserved_gb": 32.0, "tokens_per_s_per_gpu": 5000.0}
    row = dict(asdict(cell), key=cell.key, script="trainer", status="ok", measured=measured,
               **calibration_fields(cell, plan))  # fmt: skip
    (rows,) = results_rows.load_rows({"trl.json": {"machine": "h200-x1", "cells": {cell.key: row}}})
    assert rows.role == ("fit" if cell in FIT else "validation")
    w = rows.workload
    assert (w.script, w.micro_batch, w.grad_checkpointing) == (
        "trainer",
        plan["micro_batch"],
        plan["grad_checkpointing"],
    )
    if cell.method != "full":
        assert w.lora_targets == (("q", "v") if cell.targets == "qv" else results_rows.ALL_LINEAR)
        assert w.lora_dropout == 0.05
    predicted = calibration.predict(rows, {})
    chosen = plan["chosen"]
    # the row prices exactly what the plan priced for the printed line
    assert predicted.peak_gb == pytest.approx(chosen["peak_gb"], rel=1e-3)
    assert predicted.tokens_per_s_per_gpu == pytest.approx(chosen["tokens_per_s_per_gpu"], rel=1e-3)


def test_a_run_is_stopped_in_its_closing_save_once_its_summary_is_logged(tmp_path):
    import os
    import sys
    import time

    from bench.trl_cli import run_until_summary

    log = tmp_path / "steps.jsonl"
    writer = (
        "import json, sys, time\n"
        "open(sys.argv[1], 'w').write(json.dumps({'event': 'summary', 'steps': 6}) + '\\n')\n"
        "print('saving', flush=True)\ntime.sleep(60)\n"
    )
    t0 = time.time()
    rc, tail, stopped = run_until_summary([sys.executable, "-c", writer, str(log)], dict(os.environ), log, grace_s=0.5)
    assert (rc, stopped) == (0, True) and "saving" in tail
    assert time.time() - t0 < 30


def test_a_run_that_dies_before_its_summary_keeps_its_exit_code(tmp_path):
    import os
    import sys

    from bench.trl_cli import run_until_summary

    rc, tail, stopped = run_until_summary(
        [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"], dict(os.environ), tmp_path / "none.jsonl"
    )
    assert (rc, stopped) == (3, False) and "boom" in tail


def test_done_files_keep_measured_cells_from_running_again(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = tmp_path / "done.json"
    first, second = CELLS[0].key, CELLS[1].key
    done.write_text(json.dumps({"cells": {first: {"status": "ok"}, second: {"status": "error"}}}))
    out = subprocess.run([sys.executable, "bench/trl_cli.py", "--list", "--done", str(done)], cwd=root,
                         capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    assert first not in out and second in out  # an errored cell runs again
    assert len(out) == len(CELLS) - 1
