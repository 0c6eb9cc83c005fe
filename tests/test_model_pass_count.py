"""A decoder layer's memory-bound passes counted from its own ops on the meta device (model.pass_count,
LayerSaved.pass_bytes) and priced by estimate.passes for an eager layer. The llama layer's hand count (estimate.passes
_eager: each op of transformers' Mistral layer written out) is the reference the counter must reproduce; other
families move what their code moves under CUDA's autocast (a GELU MLP with LayerNorms about 0.7 of the llama layer's
bytes, its norms in fp32; Gemma-2's four norms and softcapping 1.6)."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from bench.scripts.saved_audit import FAMILIES, WIDTHS  # noqa: E402


def _counted(model_type: str, **extra):
    """(the meta-sized spec with its count, the same spec without: the llama formula's)."""
    from transformers import AutoConfig

    from generator.model.loading import _spec_by_meta

    config = AutoConfig.for_model(model_type, **{**WIDTHS, **FAMILIES[model_type], **extra}).to_dict()
    spec = _spec_by_meta({**config, "model_type": model_type}, model_type, compiled=False)
    return spec, replace(spec, layer_saved=None)


@pytest.mark.parametrize("model_type", ["mistral", "qwen3"])
def test_the_count_is_the_llama_hand_count(tmp_path, model_type):
    """Mistral's layer and Qwen3's (q and k norms): the counter's bytes are the formula's, op for op, within 0.5%."""
    from generator.estimate.passes import _eager

    counted, formula = _counted(model_type)
    assert counted.layer_saved.pass_bytes == pytest.approx(_eager(formula), rel=0.005)


def test_a_gelu_mlp_moves_its_activation_once_per_element(tmp_path):
    """StarCoder2: the MLP's biases ride in addmm and GELU reads and writes each intermediate element once (4 bytes in
    bf16), where SwiGLU's silu and product move 10; so 512 more intermediate features cost 2,048 bytes a token, and
    the layer less than the llama formula's even with CUDA's autocast running its LayerNorms in fp32 (each cast up
    and down again for q, k, v and c_fc: about 1.8x a bf16 norm's bytes)."""
    from generator.estimate.passes import _eager

    narrow, formula = _counted("starcoder2")
    wide, _ = _counted("starcoder2", intermediate_size=FAMILIES["starcoder2"]["intermediate_size"] + 512)
    assert wide.layer_saved.pass_bytes - narrow.layer_saved.pass_bytes == pytest.approx(4 * 512, rel=0.01)
    assert narrow.layer_saved.pass_bytes < 0.75 * _eager(formula)


def test_the_estimate_prices_an_eager_layer_by_its_count_and_a_fused_one_by_the_formula(tmp_path):
    from generator.estimate.passes import elementwise_bytes
    from generator.estimate.types import Workload

    counted, formula = _counted("gemma2")
    eager = Workload(method="full", seq_len=512, attention="sdpa", liger=False)
    compiled = replace(eager, compiled_layers=True)
    assert elementwise_bytes(counted, eager, 1) > 1.3 * elementwise_bytes(formula, eager, 1)  # four norms, softcaps
    assert elementwise_bytes(counted, compiled, 1) == elementwise_bytes(formula, compiled, 1)
