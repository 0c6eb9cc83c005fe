"""bench/families.py (issue 26, item 6) on CPU: the family cells are keyed by model and cut, held out of every fit,
predicted for the model and layer count that ran, and tests/tiny_model.py builds what they train."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from bench import families, sweep, sweep_grid
from bench.calibration import predict
from bench.holdout import VALIDATION_KEYS
from bench.results_rows import load_rows
from generator.model import load_model, spec_from_config

ROOT = Path(__file__).resolve().parents[1]


def test_family_cells_are_single_gpu_validation_rows_named_by_model_and_cut():
    keys = [c.key for c in families.FAMILY_CELLS]
    assert len(set(keys)) == len(keys)
    assert all(k in VALIDATION_KEYS for k in keys)
    # Mistral-7B appears only among the host-paired cells, timed beside its own machine's host probe, and in a
    # compiled-layers pair (both measured in one call)
    paired = {*families.HOST_PAIRED, *families.HOST_PAIRED_B}
    compile_pairs = {c for pair in families.COMPILE_PAIRS for c in pair}
    assert all(c.gpus == 1 and (c.model != "mistral-7b" or c in paired | compile_pairs)
               for c in families.FAMILY_CELLS)  # fmt: skip
    assert all(c.steps == 40 and c.key.endswith("-n40") for c in paired)
    cut = families.MIXTRAL_FULL_L4
    assert cut.key.startswith("train.py-mixtral-8x7b-l4-g1-ddp-full-s4096-")
    assert set(keys) <= {c.key for c in sweep_grid.CELLS}
    # they run before the two-GPU cells, so ONLY='*-g2-*' still selects only those
    order = [c.key for c in sweep_grid.CELLS]
    assert max(order.index(k) for k in keys) < min(i for i, c in enumerate(sweep_grid.CELLS) if c.gpus == 2)


def test_pick_pairs_differ_in_one_lever():
    """One lever apart; float8 against compiled bf16 layers is one (float8 compiles the layers anyway, and the plan's
    bf16 runner-up compiles them where float8 is its pick), at the micro-batch the plan prints for each where the two
    differ (float8 keeps fewer bytes a token: StarCoder2's full fine-tune fits 8 where bf16 fits 4)."""
    for pick, runner_up in families.PICK_PAIRS:
        differ = {k for k, v in asdict(pick).items() if asdict(runner_up)[k] != v}
        if differ - {"micro_batch"} == {"precision", "compiled"}:
            assert pick.precision == "fp8" and runner_up.compiled and not pick.compiled, (pick.key, runner_up.key)
            continue
        assert len(differ) == 1, (pick.key, runner_up.key, differ)


def test_plan_is_asked_for_the_cut_model_the_run_builds(tmp_path):
    cmd = sweep.plan_command(families.MIXTRAL_FULL_L4, tmp_path / "c.yaml")
    model = Path(cmd[cmd.index("--model") + 1])
    config = json.loads((model / "config.json").read_text())
    assert config["num_hidden_layers"] == 4 and config["num_local_experts"] == 8
    assert (model / "tokenizer.json").exists()
    whole = sweep.plan_command(families.MIXTRAL_QLORA, tmp_path / "q.yaml")
    assert whole[whole.index("--model") + 1] == "mixtral-8x7b"


def test_preset_command_writes_a_config_the_planner_sizes_like_the_preset(tmp_path):
    out = tmp_path / "qwen"
    res = subprocess.run(
        [sys.executable, "tests/tiny_model.py", "preset", "qwen2.5-7b", str(out), "--layers", "3"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    config = json.loads((out / "config.json").read_text())
    assert "_source" not in config and config["num_hidden_layers"] == 3
    cut, whole = load_model(str(out)), load_model("qwen2.5-7b")
    assert cut.params_per_layer == whole.params_per_layer and cut.vocab_size == whole.vocab_size
    assert cut.params_total == whole.params_total - 25 * whole.params_per_layer
    bad = subprocess.run(
        [sys.executable, "tests/tiny_model.py", "preset", "qwen2.5-7b", str(tmp_path / "x"), "--layers", "99"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert bad.returncode != 0 and bad.stderr.strip().count("\n") == 0 and "28 decoder layers" in bad.stderr


def test_calibration_predicts_a_family_row_for_its_model_and_cut():
    cell = families.MIXTRAL_FULL_L4
    synthetic = {  # made up here: no measurement
        "machine": "h200-x1",
        "cells": {cell.key: dict(asdict(cell), key=cell.key, doc_tokens=cell.doc_tokens, status="ok", command="")},
    }
    (row,) = load_rows({"synthetic.json": synthetic})
    assert (row.model, row.layers, row.role) == ("mixtral-8x7b", 4, "validation")
    four = spec_from_config({**json.loads((ROOT / "generator/presets/mixtral-8x7b.json").read_text()),
                             "num_hidden_layers": 4}, "m")  # fmt: skip
    assert row.spec.params_total == four.params_total < load_model("mixtral-8x7b").params_total
    assert "mixtral-8x7b-l4" in row.label
    assert predict(row, {}).peak_gb < 150


def test_a_model_no_preset_holds_is_planned_from_its_directory_and_scored_as_the_plan_sized_it(tmp_path):
    """The unseen-model cells give `plan` the model's directory (as a user names a model by its config) and the
    report prices their rows from bench/models: both must size the same model, head_dim below hidden/heads kept."""
    (cell,) = [c for c in families.UNSEEN_MODELS if c.model == "mistral-nemo-12b" and c.method == "lora"]
    cmd = sweep.plan_command(cell, tmp_path / "n.yaml")
    planned = load_model(cmd[cmd.index("--model") + 1])
    synthetic = {"machine": "h200-x1", "cells": {cell.key: _synthetic_row(cell, 1.0, 1.0, 1.0)}}
    (row,) = load_rows({"synthetic.json": synthetic})
    assert (row.model, row.layers, row.role) == ("mistral-nemo-12b", None, "validation")
    assert row.spec.params_total == planned.params_total and row.spec.head_dim == planned.head_dim == 128
    assert row.spec.num_heads * row.spec.head_dim < row.spec.hidden_size == 5120


def _synthetic_row(cell, alloc, reserved, tps):
    m = dict(peak_allocated_gb=alloc, peak_reserved_gb=reserved, tokens_per_s_per_gpu=tps)
    return dict(asdict(cell), key=cell.key, doc_tokens=cell.doc_tokens, status="ok", command="", measured=m)


def _holds_family_rows(data: dict) -> bool:
    """A results file with a sweep row of a model beyond Mistral-7B (whatever the file is named)."""
    cells = data.get("cells") if isinstance(data.get("cells"), dict) else {}
    return any(isinstance(c, dict) and c.get("model", "mistral-7b") != "mistral-7b" for c in cells.values())


def test_report_scores_families_beside_the_anchors_and_each_pick_against_its_runner_up():
    from bench import report
    from bench.results_rows import load_files

    pick, runner_up = families.PICK_PAIRS[0]
    (pick_row,) = load_rows({"s.json": {"machine": "h200-x1", "cells": {pick.key: _synthetic_row(pick, 1, 1, 1)}}})
    predicted = {c: predict(r, {}) for c, r in ((pick, pick_row),)}
    # The committed family rows are left out: the section must come from the synthetic ones alone.
    files = {name: data for name, data in load_files().items() if not _holds_family_rows(data)}
    before, _ = report.build(files)
    assert "Families beyond Mistral" not in before  # no family rows: no section
    e = predicted[pick]
    cells = {  # made up here: the pick measured exactly as predicted, the runner-up 10% faster than the pick
        pick.key: _synthetic_row(pick, e.peak_gb, e.reserved_gb, e.tokens_per_s_per_gpu),
        runner_up.key: _synthetic_row(runner_up, 50.0, 60.0, 1.1 * e.tokens_per_s_per_gpu),
    }
    md, _ = report.build({**files, "synthetic-families.json": {"machine": "h200-x1", "cells": cells}})
    section = md.split("## Families beyond Mistral")[1].split("\n## ")[0]
    assert "| allocated | 5% |" in section and "(2 rows)" in section
    assert "Mistral validation rows" in section
    # both steps are long (8,192 x 2): the estimator calls them GPU-bound, so no family row is host-bound
    assert "| tokens/s, GPU-bound steps | 10% |" in section and "| tokens/s, host-bound steps | 10% | - |" in section
    assert section.split("GPU-bound steps | 10% | ")[1].split("|")[0].strip().endswith("(2 rows)")
    assert pick.key not in section  # rows are named by label
    (ru_row,) = load_rows({"s.json": {"machine": "h200-x1", "cells": {runner_up.key: cells[runner_up.key]}}})
    picks_pick = e.tokens_per_s_per_gpu >= predict(ru_row, {}).tokens_per_s_per_gpu
    # choosing the pick loses 9% to the runner-up measured 10% faster; choosing the runner-up loses nothing
    assert ("9.1% (missed)" if picks_pick else "0.0% (met)") in section


def test_a_results_file_from_another_gpu_is_named_for_it_and_not_priced_as_an_h200():
    """A call for an H200 can land on an H100 (2026-12-05): the sweep names the file for the GPU it ran on and the
    report leaves its rows out rather than price them with the H200's table."""
    names = ("NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090", "NVIDIA A100-SXM4-80GB", None)
    assert [sweep.gpu_label(n) for n in names] == ["h200", "h100", "rtx4090", "a100", "gpu"]
    cell = families.MIXTRAL_FULL_L4
    cells = {cell.key: _synthetic_row(cell, 1.0, 1.0, 1.0)}
    on = {gpu: load_rows({"s.json": {"machine": "x", "versions": {"gpu": gpu}, "cells": cells}})
          for gpu in ("NVIDIA H200", "NVIDIA H100 80GB HBM3")}  # fmt: skip
    assert len(on["NVIDIA H200"]) == 1 and on["NVIDIA H100 80GB HBM3"] == []
