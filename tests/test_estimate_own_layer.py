"""A model's own layer where it departs from the llama layer the activation formula prices (estimate.own_layer): its
norms, counted on the CPU at sizing time (model.meta._norms), and a fused q/k/v projection's storage. A whole layer
of Gemma-3 (four norms, the weight applied in fp32), OLMo-2 (post-norms, q and k norms over the full width), Gemma
and Phi-3 (qkv_proj, whose output the kept value is a view of) keeps what the estimate prices, counted by
bench/scripts/saved_audit.py as the audit does (0.712, 0.894, 0.922 and 0.914 of it priced before); a llama layer is
unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from bench.scripts.saved_audit import FAMILIES, count_one  # noqa: E402


@pytest.mark.parametrize("model_type", ["gemma3_text", "olmo2", "gemma", "phi3", "mistral"])
def test_a_layer_keeps_what_its_norms_are_priced_at(tmp_path: Path, monkeypatch, model_type):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    ratio = count_one(model_type, FAMILIES[model_type], tmp_path)["priced_over_counted"]
    assert 0.99 <= ratio <= 1.02, ratio


def test_norms_that_keep_less_than_the_llama_ones_are_not_taken_below_it(tmp_path: Path, monkeypatch):
    """GPT-J's one LayerNorm a layer keeps 2 bytes an element, not the llama pair's 12: the layer stays priced at
    least at the formula's norms (its GELU MLP is not yet the formula's), above what it keeps."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert count_one("gptj", FAMILIES["gptj"], tmp_path)["priced_over_counted"] >= 1.0
