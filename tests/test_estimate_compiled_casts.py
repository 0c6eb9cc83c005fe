"""A compiled decoder layer's bf16 weight casts under autocast: ops of its own graph, not autocast's cache.

Eager autocast caches the bf16 copy of every fp32 leaf weight it casts until the autocast region exits, so a full
fine-tune with fp32 weights holds every copy at the loss, checkpointed or not. Under train.py --compile-layers dynamo
traces the autocast region into each layer's graph and AOTAutograd emits the casts as the graph's own ops: they live
as long as the graph keeps them, which under checkpointing (nothing saved) is the layer's call. The estimate then
holds only lm_head's copy (eager, outside the layers) at the loss: Llama-3.2-3B full at 4,096 x 2 checkpointed on an
H100 allocated 59.30 GB compiled against 62.94 eager (h100-x1-levers-in-step-2026-12-07), and Qwen2.5-3B, predicted
before it ran with the casts left out, 60.24 against 60.14 (h100-x1-cast-blind-2026-12-07; 63.04 with them).
Checked here on a tiny Llama on the CPU: the layer's forward graph casts each of its Linear weights itself. Under
transformers >= 5.23 the checkpoint sits inside the compiled region, where dynamo gave up on the layer and ran it eager
unless train.py's compile_layers lets the recompute skip transformers' output-capturing side effect: without that,
no graph is compiled here and the test fails."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from generator.estimate import Workload  # noqa: E402
from generator.estimate.activations import activation_terms  # noqa: E402
from generator.model import spec_from_config  # noqa: E402
from training.model import enable_grad_checkpointing  # noqa: E402
from training.precision import compile_layers  # noqa: E402

VOCAB, HIDDEN, INTER, SEQ = 256, 64, 128, 16


def _tiny():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)  # fmt: skip
    model = LlamaForCausalLM(cfg).float()
    enable_grad_checkpointing(model)
    model.train()
    return model, spec_from_config(cfg.to_dict(), "tiny")


def _weight_casts_in_forward_graphs(model) -> list[tuple[int, ...]]:
    """Shapes of the fp32 graph inputs each compiled layer's forward graph converts to bf16 (train.py compiles each
    layer in place, training/precision.py; a recording backend stands in for inductor)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    shapes: list[tuple[int, ...]] = []

    def forward_compiler(gm, example_inputs):
        inputs = {n.name: n for n in gm.graph.nodes if n.op == "placeholder"}
        for n in gm.graph.nodes:
            if n.op == "call_function" and "_to_copy" in str(n.target):
                src, dtype = n.args[0], n.kwargs.get("dtype")
                meta = src.meta.get("val") if src.name in inputs else None
                if dtype == torch.bfloat16 and meta is not None and meta.dtype == torch.float32 and meta.dim() == 2:
                    shapes.append(tuple(meta.shape))
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    for layer in model.model.layers:
        layer.compile(backend=aot_autograd(fw_compiler=forward_compiler), dynamic=False)
    ids = torch.randint(0, VOCAB, (1, SEQ))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(input_ids=ids, labels=ids, use_cache=False)
    out.loss.backward()
    torch._dynamo.reset()
    return shapes


def test_a_compiled_layer_casts_its_own_weights_and_the_estimate_holds_none_at_the_loss(monkeypatch):
    config = torch._dynamo.config
    if hasattr(config, "skip_fwd_side_effects_in_bwd_under_checkpoint"):  # compile_layers sets it: restored after
        monkeypatch.setattr(config, "skip_fwd_side_effects_in_bwd_under_checkpoint", False)
    model, spec = _tiny()
    compile_layers(model)  # train.py's own (its inductor backend is replaced below by a recording one)
    casts = _weight_casts_in_forward_graphs(model)
    q_o = (HIDDEN, HIDDEN)
    kv = (spec.num_kv_heads * spec.head_dim, HIDDEN)
    mlp = [(INTER, HIDDEN), (INTER, HIDDEN), (HIDDEN, INTER)]
    for shape in (q_o, kv, *mlp):  # every Linear of the layer, in its graph
        assert shape in casts, (shape, casts)
    full = dict(method="full", load_dtype="fp32", seq_len=SEQ, grad_checkpointing=True)
    head = 2.0 * VOCAB * HIDDEN
    compiled = activation_terms(spec, Workload(**full, compiled_layers=True), "ddp")["forward_end"]
    assert compiled["autocast_weight_copies"] == head
    eager = activation_terms(spec, Workload(**full), "ddp")["forward_end"]
    assert eager["autocast_weight_copies"] == 2.0 * (spec.params_total - spec.params_embedding)
    # without checkpointing the compiled graph saves its casts for its backward, as the cache would keep them
    kept = activation_terms(spec, Workload(**{**full, "grad_checkpointing": False}, compiled_layers=True), "ddp")
    assert kept["forward_end"]["autocast_weight_copies"] == eager["autocast_weight_copies"]
