"""What a compiled decoder layer keeps for backward (fp8 and --compile-layers compile each layer), against what it
really saves: the tiny Mistral and Mixtral of the eager counts, each decoder layer compiled through AOTAutograd with
the min-cut partitioner inductor uses (which decides what is saved and what is recomputed; the graphs themselves run
uncompiled, so the test needs no C++ toolchain), counted by the same saved-tensor hooks.

The eager formula over-counts a compiled layer by 15-45% here: the partitioner saves a norm's input and recomputes its
fp32 upcast and normalised tensor, and recomputes SwiGLU's (an expert's) activation from gate and up, as Liger's
kernels do (generator/estimate/activations._layer_bytes). On real widths the GPU's memory history agrees within 0.1%
(bench/results/memhist-h200-2026-12-03.json); here LoRA's rank-16 intermediates, which the partitioner keeps in a
form the formula does not count, are a few percent of a 256-wide layer."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from bench.scripts.saved_audit import compile_blocks  # noqa: E402
from generator.estimate import Workload  # noqa: E402
from generator.estimate.activations import activation_terms  # noqa: E402
from tests.test_estimate_lora_saved import LAYERS, SEQ, plain_loop_inputs, saved_bytes_per_layer, tiny  # noqa: E402
from tests.test_estimate_moe_saved import tiny_mixtral  # noqa: E402

CHECKED = slice(1, 3)
"""The layers compiled and counted: layer 0 also holds the shared rotary cos/sin, and two are enough (each compiled
layer is a compile of its own, most of the test's time)."""


def _compile_layers(model) -> None:
    compile_blocks(model.get_decoder().layers[CHECKED])


def _per_layer(spec, method: str, compiled: bool) -> float:
    workload = Workload(method=method, seq_len=SEQ, grad_checkpointing=False, load_dtype="bf16", lora_r=16,
                        compiled_layers=compiled)  # fmt: skip
    fwd = activation_terms(spec, workload, "ddp")["forward_end"]
    return (fwd["activations"] + fwd["attention_bias"]) / LAYERS


@pytest.mark.parametrize(("model", "method"), [("mistral", "lora"), ("mixtral", "full")])
def test_compiled_layer_keeps_what_the_compiled_formula_counts(model, method):
    built, spec = tiny(method, "bf16", None) if model == "mistral" else tiny_mixtral(method)
    _compile_layers(built)
    inputs, _ = plain_loop_inputs()
    counted = saved_bytes_per_layer(built, inputs)[CHECKED]
    compiled, eager = _per_layer(spec, method, True), _per_layer(spec, method, False)
    for layer in counted:
        assert compiled == pytest.approx(layer, rel=0.04)
        assert eager > 1.1 * layer  # what the model said before: the saved set really is smaller compiled
