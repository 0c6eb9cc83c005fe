"""Calibration gate: the current estimator against the committed measurements in bench/results/, and bench/REPORT.md
kept in step with them. A change to the memory model that breaks calibration fails here."""

from __future__ import annotations

import json
import shutil

import pytest

from bench import report
from bench.calibration import error_pct, measured_busbw, predict
from bench.results_rows import RESULTS_DIR, load_files, load_rows
from bench.targets import ALLOC_TOL, RESERVED_TOL

FILES = load_files()
BUSBW = measured_busbw(FILES)
# torch.compile rows are shown in the report but not modelled (the generator does not emit compilation).
# Fit rows only: the held-out validation rows have their own targets (REPORT.md's validation table, tested below).
MEMORY_ROWS = [r for r in load_rows(FILES) if r.alloc_gb is not None and not r.unmodelled and r.role == "fit"]


def test_committed_results_hold_the_measured_memory_points():
    assert len(MEMORY_ROWS) >= 40
    assert {r.strategy for r in MEMORY_ROWS if r.from_matrix} == {
        "ddp",
        "fsdp",
        "fsdp_grad_op",
        "zero1",
        "zero2",
        "zero3",
    }
    assert {r.method for r in MEMORY_ROWS if r.from_matrix} == {"full", "lora", "qlora"}
    assert BUSBW[2] == pytest.approx(339.292)  # probe-h200x2.json, all-reduce at 2 GB


@pytest.mark.parametrize("row", MEMORY_ROWS, ids=lambda r: f"{r.label} [{r.source}]")
def test_memory_target(row):
    e = predict(row, BUSBW)
    assert abs(error_pct(e.peak_gb, row.alloc_gb)) <= ALLOC_TOL, f"predicted {e.peak_gb:.2f} GB"
    if row.reserved_gb is not None:
        assert abs(error_pct(e.reserved_gb, row.reserved_gb)) <= RESERVED_TOL, f"predicted {e.reserved_gb:.2f} GB"


# Both render the whole report, which sizes every bench model on the meta device (cold, ~45 s of one core): one
# worker runs the two, the second from the meta counts the first left in the suite's shared cache (tests/conftest.py).
@pytest.mark.xdist_group("report")
def test_report_is_up_to_date():
    assert report.main(["--check"]) == 0, "run: python bench/report.py"


@pytest.mark.xdist_group("report")
def test_check_fails_on_a_stale_report(tmp_path, monkeypatch):
    stale = tmp_path / "REPORT.md"
    stale.write_text(report.REPORT.read_text().replace("met", "missed", 1))
    monkeypatch.setattr(report, "REPORT", stale)
    assert report.main(["--check"]) == 1


def test_meta_seeds_hold_the_rendered_entries_and_install_whole(tmp_path, monkeypatch):
    """bench/meta_seed.py: a render's refresh keeps exactly the cache entries of the configs the meta device counts
    (a closed-form family has none; a seed no longer read is dropped), and install never replaces an entry."""
    from bench import meta_seed
    from generator.model import load_model
    from generator.model.meta_cache import entries

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(meta_seed, "SEEDS", tmp_path / "seeds")
    gpt2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 512, "n_positions": 256}
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "config.json").write_text(json.dumps(gpt2))
    load_model(str(tmp_path / "gpt2"))
    (tmp_path / "seeds").mkdir()
    (tmp_path / "seeds" / "stale.json").write_text("{}")
    assert meta_seed.refresh([gpt2, {"model_type": "llama"}, None]) == 1
    entry = entries(gpt2)[0]
    assert [p.name for p in (tmp_path / "seeds").iterdir()] == [entry.name]
    target = tmp_path / "cache"
    target.mkdir()
    (target / entry.name).write_text("kept")
    meta_seed.install(target)
    assert (target / entry.name).read_text() == "kept" and not list(target.glob("*.part"))
    meta_seed.install(tmp_path / "empty")
    assert (tmp_path / "empty" / entry.name).read_bytes() == entry.read_bytes()


def test_plots_are_committed_and_embedded():
    text = report.REPORT.read_text()
    for name in report.PLOTS.values():
        png = report.BENCH / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({name})" in text


def _cell(strategy: str, ckpt: bool, status: str, tps: float | None, alloc: float | None) -> dict:
    """A matrix cell as bench/run_matrix.py writes it (values made up for this test, not measured)."""
    measured = {"tokens_per_s_per_gpu": tps, "peak_allocated_gb": alloc, "peak_reserved_gb": alloc and alloc * 1.1}
    return {
        "gpus": 2,
        "strategy": strategy,
        "method": "full",
        "seq_len": 4096,
        "micro_batch": 1,
        "ckpt": ckpt,
        "status": status,
        "measured": measured if status == "ok" else {},
        "config": {"gradient_accumulation_steps": 1},
        "command": "python -m accelerate.commands.launch train.py --init random",
    }


def test_matrix_results_are_ranked_against_the_planner(tmp_path):
    shutil.copy(RESULTS_DIR / "probe-h200x2.json", tmp_path)
    cells = {
        "a": _cell("fsdp_grad_op", False, "ok", 6000.0, 80.0),  # the planner's pick for this workload (fp32 load)
        "b": _cell("fsdp", False, "ok", 6300.0, 70.0),
        "c": _cell("ddp", True, "oom", None, None),
    }
    matrix = {"machine": "h200-x2", "versions": {}, "cells": cells}
    (tmp_path / "h200-x2-2099-01-01.json").write_text(json.dumps(matrix))
    text, plots = report.build(load_files(tmp_path))
    line = next(ln for ln in text.splitlines() if ln.startswith("| h200-x2-2099-01-01 2 GPU full s4096 mb1 fp32"))
    assert "fsdp_grad_op no-ckpt" in line and "fsdp no-ckpt" in line and "+4.8%" in line
    assert "| recommendation within 3% of the fastest that fits | 1 | missed |" in text
    assert "| 2x ddp fp32 s4096 mb1 ckpt | h200-x2-2099-01-01.json | oom |" in text
    assert len(plots["throughput"]) == 2 and len(plots["memory"]) == 2


@pytest.mark.parametrize(("pick_status", "verdict"), [("oom", "| 1 | missed |"), (None, "| 0 | not assessed |")])
def test_a_pick_that_ran_out_of_memory_misses_and_an_unmeasured_one_is_not_judged(tmp_path, pick_status, verdict):
    shutil.copy(RESULTS_DIR / "probe-h200x2.json", tmp_path)
    cells = {"b": _cell("fsdp", False, "ok", 6300.0, 70.0)}
    if pick_status:
        cells["a"] = _cell("fsdp_grad_op", False, pick_status, None, None)
    matrix = {"machine": "h200-x2", "versions": {}, "cells": cells}
    (tmp_path / "h200-x2-2099-01-01.json").write_text(json.dumps(matrix))
    text, _ = report.build(load_files(tmp_path))
    assert f"| recommendation within 3% of the fastest that fits {verdict}" in text


def test_a_row_whose_model_ran_other_code_is_shown_unscored(monkeypatch):
    """bench/holdout.OTHER_CODE: Falcon's rows ran under transformers 5.17 (the GPU image's), whose FalconAttention
    takes SDPA's math kernel; a newer install counts other code for it, so those rows leave the validation targets
    and are shown beside what the estimator predicted when they ran. Under the version they ran with they score."""
    from bench import results_rows

    name = "h200-x1-falcon-memory-2026-12-06.json"
    one = {name: FILES[name]}
    for installed, role in (("5.25.0", "other-code"), ("5.17.0", "validation")):
        monkeypatch.setattr(results_rows, "installed_transformers", lambda v=installed: v)
        rows = load_rows(one)
        assert rows and {(r.model, r.transformers, r.role) for r in rows} == {("falcon-default", "5.17.0", role)}
    assert all(len(r.ran_predicted) == 2 and r.ran_predicted[1] > 0 for r in rows)
    monkeypatch.setattr(results_rows, "installed_transformers", lambda: "5.25.0")
    md, _ = report.build(one)
    held = md.split("## Validation rows")[1].split("## Peak memory")[0]
    assert "falcon-default lora" not in held.split("Rows whose model's code")[0]  # out of the scored tables
    table = held.split("Rows whose model's code")[1]
    assert "| 5.17.0 |" in table and "(+114.1%)" in table  # the run's own prediction, its error beside it


def test_a_missed_target_lists_each_cause_as_its_own_bullet():
    """REPORT.md's held-out miss: one bullet naming the rows and the lead, then one sub-bullet per cause, so a
    reader finds a row's cause without reading one paragraph of every cause."""
    from bench.targets import Result, explain

    missed = Result("tokens/s within 10%", 3, "missed", "+12.0% (a)", ("a (+12.0%)", "b (-11.0%)"))
    lines = explain(missed, {"tokens/s within 10%": ("Two causes.", "Host-bound: ...", "Packed: ...")})
    assert lines == ["- **tokens/s within 10%: missed** on a (+12.0%); b (-11.0%). Two causes.",
                     "  - Host-bound: ...", "  - Packed: ..."]  # fmt: skip
    assert explain(missed, {})[0].endswith("compare the breakdown of these rows with the measurement.")
