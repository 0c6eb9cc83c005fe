"""Recipe train commands say what they train on and for how long, and a recipe says when its prediction is more
than 10% off its measured row (issue 19 item 14)."""

import re
import shlex
from pathlib import Path

import pytest

from docsgen import recipe_evidence
from docsgen.recipes import DATA_ARGS, RECIPES, make_recipe_plan

ROOT = Path(__file__).resolve().parents[1]


def train_commands(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(r"accelerate launch .* train\.py ", line)]


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_every_train_command_names_its_dataset_and_steps(recipe):
    text = (ROOT / "recipes" / recipe.name / "README.md").read_text()
    commands = train_commands(text)
    assert commands
    for line in commands:
        argv = shlex.split(line)
        train = argv[argv.index("train.py") :]
        assert train[train.index("--dataset") + 1] == "recipes/data/synthetic_instruct.jsonl"
        assert train[train.index("--max-steps") + 1] == "100"
    assert "replace --dataset with your data" in text


def test_the_written_data_args_are_train_py_defaults():
    from training.args import build_parser

    defaults = build_parser().parse_args([])
    assert (defaults.dataset, str(defaults.max_steps)) == (DATA_ARGS[1], DATA_ARGS[3])


@pytest.mark.parametrize(("measured_ratio", "said"), [(0.8, True), (1.25, True), (0.95, False)])
def test_a_prediction_more_than_10_percent_off_its_measured_row_is_said(monkeypatch, measured_ratio, said):
    plan = make_recipe_plan(next(r for r in RECIPES if r.name == "h200-sxm-2-full"))
    tokens = plan.estimate.tokens_per_s_per_gpu * measured_ratio
    row = ("- Measured on this machine with train.py (...)", tokens, plan.estimate.reserved_gb)
    monkeypatch.setattr(recipe_evidence, "_trial_line", lambda p: row)
    line = recipe_evidence.measured_run_line(plan)
    assert ("differs from this measurement by more than 10%" in line) is said
    if said:
        assert f"{tokens:,.1f} measured" in line and "reserved" not in line.split("10%:")[1]


def test_a_recipe_with_no_measured_row_says_it_is_predicted_only(monkeypatch):
    # no matrix row ran h200-sxm-2-full's pick with its exact settings
    plan = make_recipe_plan(next(r for r in RECIPES if r.name == "h200-sxm-2-full"))
    assert "was not measured (predicted only)" in recipe_evidence.measured_run_line(plan)
    assert "fastest measured" not in (ROOT / "recipes/README.md").read_text()
