"""Hybrids and weights that only look like experts (model.meta, model.saved_count, estimate.attention.layer_groups).

Fused experts are told by the config's expert count, not by rank: RecurrentGemma's RG-LRU gates are [heads, width,
width] and were taken for experts, which put its layer count over "expert" blocks without attention (none). A hybrid
(blocks without softmax attention among its layers) is counted over every kind of block, weighed by the kinds' shares
of its layers (the first blocks are not its mix). Each is checked against its tiny model run for real on the CPU
(bench/scripts/saved_audit.py, 640 tokens; the meta count ran 128-512): before, RecurrentGemma read 0.87 fully
trained, Qwen3-Next 0.75 and 0.71 under LoRA, and a partially windowed model's own-Linears LoRA took the whole
model's Linears into each window group (RecurrentGemma's LoRA 1.14, 1.27 once counted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from bench.scripts.saved_audit import COUNTED_LAYERS, HYBRIDS, WIDTHS, count_one  # noqa: E402


def _spec(tmp_path: Path, model_type: str, **extra):
    from transformers import AutoConfig

    from generator.model import load_model

    config = AutoConfig.for_model(
        model_type, **{**WIDTHS, "num_hidden_layers": COUNTED_LAYERS, **HYBRIDS.get(model_type, {}), **extra}
    )
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps({**config.to_dict(), "model_type": model_type}, default=str))
    return load_model(str(tmp_path), compiled=False)


@pytest.fixture(scope="module")
def recurrent_gemma(tmp_path_factory):
    """RecurrentGemma's tiny spec, sized once for the tests that read it (its meta count takes ~20 s on 2 cores)."""
    return _spec(tmp_path_factory.mktemp("recurrent_gemma"), "recurrent_gemma")


@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("model_type", sorted(HYBRIDS))
def test_a_hybrid_layer_keeps_what_it_is_priced_at(tmp_path: Path, model_type, method):
    row = count_one(model_type, HYBRIDS[model_type], tmp_path, method)
    assert 0.97 <= row["priced_over_counted"] <= 1.02, row


def test_recurrent_gates_are_not_experts(recurrent_gemma):
    """RecurrentGemma sizes dense, and its layer is counted (its attention and RG-LRU blocks both), which the plan's
    hybrid line says: its memory counted, its speed rough."""
    from generator.plan.model_reasons import recurrent_reason

    spec = recurrent_gemma
    assert spec.num_experts == 0 and spec.matmul_params_active == spec.params_total - spec.params_embedding
    assert spec.layer_saved is not None and spec.recurrent_layers == 4
    (line,) = recurrent_reason(spec)
    assert "memory is counted" in line and "speed for this model is rough" in line


def test_experts_are_the_config_count_s_leading_dimension():
    from generator.model.config_dims import expert_count, is_expert_tensor

    assert expert_count({"num_local_experts": 8}) == 8 and expert_count({"n_routed_experts": 64}) == 64
    assert expert_count({"num_experts": None, "intermediate_size": 4}) == 0
    assert is_expert_tensor((8, 28672, 4096), 8)
    assert not is_expert_tensor((10, 256, 256), 0)  # RecurrentGemma's gate: no expert count
    assert not is_expert_tensor((2, 6144, 3072), 256)  # two always-active shared experts beside 256 routed ones
    assert not is_expert_tensor((8, 3, 16, 16), 8)  # a patch embedding
    assert not is_expert_tensor((8, 4096), 8)  # an expert bias is a bias


def test_a_hybrid_is_weighed_by_its_layers_not_its_first_blocks(tmp_path: Path):
    """Two nine-layer RecurrentGemma models whose first six blocks (the counted ones) are the same, one with three
    attention layers and one with two: the count follows the layers' share, and more recurrent layers (which keep
    more here) cost more."""
    pattern = ["recurrent", "recurrent", "attention"]
    three = _spec(tmp_path / "a", "recurrent_gemma", num_hidden_layers=9, block_types=pattern)
    two = _spec(tmp_path / "b", "recurrent_gemma", num_hidden_layers=9, block_types=[*pattern * 2, *["recurrent"] * 3])
    assert (three.recurrent_layers, two.recurrent_layers) == (6, 7)
    assert two.layer_saved.trained > three.layer_saved.trained


def test_window_groups_share_the_model_s_linears(recurrent_gemma):
    """A partially windowed model's layer groups (its windowed and full-attention layers) each price the model's mean
    layer's adapters: the groups' LoRA bytes per layer agree (the windowed group had taken every block's Linears into
    its two layers)."""
    from generator.estimate.activations import _layer_bytes
    from generator.estimate.attention import layer_groups
    from generator.estimate.lora_targets import lora_params
    from generator.estimate.scripts import ALL_LINEAR
    from generator.estimate.types import Workload

    spec = recurrent_gemma
    workload = Workload(method="lora", seq_len=640, attention="sdpa", lora_r=16, lora_targets=ALL_LINEAR)
    groups = layer_groups(spec)
    assert len(groups) == 2
    windowed, full = (_layer_bytes(g, workload, 2, False) for g in groups)
    assert windowed == pytest.approx(full, rel=1e-6)
    assert sum(lora_params(g, 16, ALL_LINEAR) for g in groups) == pytest.approx(lora_params(spec, 16, ALL_LINEAR))


def test_attention_adapters_sit_in_attention_layers_only(tmp_path: Path):
    """Qwen3-Next adapts q/k/v/o by name (an MoE): in its attention layers, two of six here, not in all six."""
    from generator.estimate.lora_targets import adapted_modules, target_layers
    from generator.estimate.scripts import ALL_LINEAR

    spec = _spec(tmp_path, "qwen3_next")
    assert target_layers(spec, "q") == 2 and target_layers(spec, "gate") == spec.num_layers
    assert {n for _, _, _, n in adapted_modules(spec, ALL_LINEAR)} == {2}


@pytest.mark.parametrize(("model_type", "beside", "without"), [("falcon_h1", 32, 0), ("zamba2", 9, 45)])
def test_a_mixer_beside_attention_is_told_apart_from_a_layer_without_attention(model_type, beside, without):
    """Falcon-H1 runs a Mamba mixer beside the attention of every layer, Zamba2 in its shared attention blocks (the
    config's layer_types 'hybrid'); such a layer has softmax attention, so it is not among the recurrent layers, but
    the plan still says that the mixer's scan is not priced (it had said nothing for Falcon-H1)."""
    from dataclasses import replace

    from transformers import AutoConfig

    from generator.model import load_model
    from generator.model.config_dims import mixer_layers, recurrent_layers
    from generator.plan.model_reasons import recurrent_reason

    dims = {"layer_types": AutoConfig.for_model(model_type).layer_types}
    assert (mixer_layers(dims), recurrent_layers(dims)) == (beside, without)
    spec = replace(load_model("mistral-7b"), mixer_layers=beside, recurrent_layers=without)
    lines = recurrent_reason(spec)
    assert len(lines) == 1 + bool(without)
    assert f"{beside} of 32 decoder layers run a recurrent mixer" in lines[0] and "scan" in lines[0]
