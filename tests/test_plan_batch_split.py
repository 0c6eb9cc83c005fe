"""A --global-batch that does not split over the GPUs on offer (issue 19, item 1): never a silent plan on fewer GPUs
ending in "does not fit, try LoRA"; name the batches that split over all of them."""

from __future__ import annotations

import json

from generator.cli import main

BASE = ["plan", "--model", "mistral-7b"]


def test_nothing_fits_on_fewer_gpus_names_the_batches_that_keep_them(capsys):
    # bf16: a full fine-tune of Mistral-7B in float8 fits one H200 under DDP (h200-x1-fp8-2026-12-01-rerun.json)
    # ... and eager: compiled layers hold no weight copies at the loss, which fits (test_estimate_compiled_casts.py)
    assert (
        main([*BASE, "--machine", "h200-sxm-2", "--global-batch", "3", "--precision", "bf16", "--no-compile-layers"])
        == 2
    )
    err = capsys.readouterr().err
    assert "--global-batch 2 or 4" in err and "all 2 GPUs" in err
    assert "--method lora" not in err and "1x" not in err


def test_a_plan_on_fewer_gpus_says_why_and_how_to_use_them_all(capsys):
    assert main([*BASE, "--machine", "h200-nvl-8", "--global-batch", "12", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["gpu_ids"]) < 8
    assert any("--global-batch 8 or 16 to use all 8 GPUs" in w for w in doc["warnings"])


def test_a_batch_that_splits_adds_no_warning(capsys):
    assert main([*BASE, "--machine", "h200-nvl-8", "--global-batch", "16", "--json"]) == 0
    assert not any("global batch" in w for w in json.loads(capsys.readouterr().out)["warnings"])
