"""The ops a decoder layer dispatches, counted on the meta device at sizing (model.op_count, ModelSpec.layer_ops), and
the host time the estimator prices from them for a model with no host rows of its own (estimate.host_time.host_scale):
the llama layer's code counts as the probe's Mistral layer does, other families as their code runs, and an eager step
of such a model takes the Mistral row at that ratio (a compiled one as it was)."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from bench.scripts.saved_audit import FAMILIES, WIDTHS  # noqa: E402


def _spec(model_type: str):
    from transformers import AutoConfig

    from generator.model.loading import _spec_by_meta

    config = AutoConfig.for_model(model_type, **{**WIDTHS, **FAMILIES[model_type]}).to_dict()
    return _spec_by_meta({**config, "model_type": model_type}, model_type, compiled=False)


def test_the_llama_layer_counts_as_the_probes_mistral_layer():
    """Llama's decoder layer is Mistral's code: the same ops forward and backward, full and frozen, at other widths
    (the count does not depend on them), so its host time is the Mistral row's."""
    ops = _spec("llama").layer_ops
    assert ops.full == ops.reference_full and ops.frozen == ops.reference_frozen
    assert all(f > 0 and b > f for f, b in (ops.full, ops.frozen))  # backward issues more than forward
    assert ops.adapter[0] > 0 and ops.adapter_dropout[0] > ops.adapter[0]  # dropout's mask and multiply


def test_other_layers_count_what_their_code_runs():
    """Qwen3's q and k norms add ops to the llama layer; StarCoder2's LayerNorms and GELU MLP with biases run fewer
    forward, and its LoRA (train.py's default targets: q/k/v/o_proj alone) is priced well under the Mistral row's
    seven adapters."""
    from generator.estimate.host_time import host_scale

    qwen3 = _spec("qwen3").layer_ops
    assert qwen3.frozen[0] > qwen3.reference_frozen[0] and qwen3.full[1] > qwen3.reference_full[1]
    starcoder2 = _spec("starcoder2")
    assert starcoder2.layer_ops.frozen[0] < starcoder2.layer_ops.reference_frozen[0]
    forward, backward = host_scale(starcoder2, "lora", adapters=4, dropout=False)
    assert forward < 0.8 and backward < 0.8
    assert host_scale(replace(starcoder2, layer_ops=None), "lora", 4, False) == (1.0, 1.0)  # not counted: as before


def test_an_eager_step_takes_the_mistral_row_at_the_counted_ratio():
    """The estimator's host time of an eager LoRA step of a model with no rows of its own moves by host_scale's
    factors from what the Mistral row alone gives; a compiled step's does not (inductor's kernels are not the eager
    count's)."""
    from generator.estimate.compute_source import shipped_table
    from generator.estimate.compute_time import compute_time
    from generator.estimate.host_time import host_scale
    from generator.estimate.types import Workload

    spec = _spec("starcoder2")
    table = shipped_table()
    eager = Workload(method="lora", seq_len=512, micro_batch=1, lora_targets=("q", "k", "v", "o"))
    counted, uncounted = (compute_time(table, m, eager, "ddp").host_s for m in (spec, replace(spec, layer_ops=None)))
    assert counted < 0.9 * uncounted
    f, b = host_scale(spec, "lora", adapters=4, dropout=False)
    assert min(f, b) * uncounted <= counted  # the layers at the count's factors, the step's own part unscaled
    compiled = replace(eager, compiled_layers=True)
    assert compute_time(table, spec, compiled, "ddp").host_s == pytest.approx(
        compute_time(table, replace(spec, layer_ops=None), compiled, "ddp").host_s
    )


@pytest.mark.parametrize("dropout", [0.0, 0.05])
def test_the_adapters_ops_written_down_are_what_the_installed_peft_dispatches(dropout):
    """Sizing does not import peft (it brings bitsandbytes, whose CPU backend reaches for the Hub at import), so what
    one adapter adds is written down; counted here with the installed peft, it must still be that."""
    from generator.model.op_count import ADAPTER_DROPOUT_OPS, ADAPTER_OPS, adapter_ops

    assert adapter_ops(dropout) == (ADAPTER_DROPOUT_OPS if dropout else ADAPTER_OPS)


def test_sizing_imports_neither_peft_nor_bitsandbytes():
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys, logging; logging.disable(logging.WARNING)\n"
        "from transformers import AutoConfig\n"
        "from generator.model import meta\n"
        "config = AutoConfig.for_model('qwen3', num_hidden_layers=4).to_dict()\n"
        "ops = meta.meta_counts(config, 'qwen3', compiled=False).ops  # the op count, without the compiled traces\n"
        "print(ops is not None, 'peft' in sys.modules, 'bitsandbytes' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["True", "False", "False"], out.stderr[-2000:]
