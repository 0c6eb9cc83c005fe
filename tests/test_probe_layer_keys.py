"""A layer row `probe --compute --full` times must be found again by the estimator: the widths the probe writes for a
model (generator/probe/compute_layers.layer_dims, from transformers' config object) are the ones the planner's
ModelSpec keys its lookup by (generator/estimate/layer_rows.layer_row), for every MoE the bench has run. Qwen3-MoE's
rows once carried its unused dense width (6,144) where the spec holds the experts' (768), and were never read."""

from __future__ import annotations

import pytest
from transformers import AutoConfig

from bench.harness import bench_model_config
from generator.model import spec_from_any_config
from generator.model.presets import preset_config
from generator.probe.compute_layers import layer_dims


@pytest.mark.parametrize("name", ["mixtral-8x7b", "olmoe-1b-7b", "qwen3-30b-a3b"])
def test_probe_rows_are_keyed_by_the_widths_the_planner_looks_up(name):
    config = bench_model_config(name) or {k: v for k, v in preset_config(name).items() if not k.startswith("_")}
    spec = spec_from_any_config(config, name)
    dims = layer_dims(AutoConfig.for_model(config["model_type"], **{k: v for k, v in config.items()
                                                                    if k != "model_type"}))  # fmt: skip
    assert (dims["hidden"], dims["intermediate"], dims["heads"], dims["kv_heads"], dims["experts"], dims["top_k"]) == (
        spec.hidden_size, spec.intermediate_size, spec.num_heads, spec.num_kv_heads, spec.num_experts,
        max(spec.experts_per_token, 1),
    )  # fmt: skip
