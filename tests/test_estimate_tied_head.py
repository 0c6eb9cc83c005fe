"""The lm_head's bf16 autocast copy under fp32 weights, tied to the embeddings or not, against what autograd saves.

A model that ties lm_head to its embeddings (Llama-3.2-3B, StarCoder2, Gemma-2) still casts that fp32 matrix to bf16
for lm_head's matmul under autocast and keeps the copy for lm_head's backward; only the embedding lookup reads the fp32
matrix itself. The parameter count holds the tied matrix once, as the embeddings, which is how the copy went uncounted
(0.79 GB for Llama-3.2-3B's 128,256 x 3,072). Counted on a tiny Llama on the CPU under bf16 autocast, with
checkpointing so that lm_head's is the only weight copy the graph keeps at the loss."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from generator.estimate import Workload  # noqa: E402
from generator.estimate.activations import activation_terms  # noqa: E402
from generator.model import spec_from_config  # noqa: E402
from training.model import enable_grad_checkpointing  # noqa: E402

VOCAB, HIDDEN, LAYERS, SEQ = 1000, 64, 2, 32


def _tiny(tied: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=LAYERS,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied)  # fmt: skip
    model = LlamaForCausalLM(cfg).float()
    enable_grad_checkpointing(model)  # train.py's own
    model.train()
    return model, spec_from_config(cfg.to_dict(), "tiny")


def _saved_head_copies(model) -> int:
    """Bytes of bf16 vocab x hidden matrices the graph holds after forward and loss, once per storage."""
    seen: dict[int, int] = {}

    def pack(t):
        if t.dtype == torch.bfloat16 and t.numel() == VOCAB * HIDDEN:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    ids = torch.randint(0, VOCAB, (1, SEQ))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.autocast("cpu", dtype=torch.bfloat16):
        model(input_ids=ids, labels=ids, use_cache=False)
    return sum(seen.values())


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_lm_head_copy_counted_tied_or_not(tied: bool):
    model, spec = _tiny(tied)
    assert spec.tie_embeddings is tied
    counted = _saved_head_copies(model)
    assert counted == 2 * VOCAB * HIDDEN  # the copy exists either way
    workload = Workload(method="full", load_dtype="fp32", seq_len=SEQ, grad_checkpointing=True)
    start = activation_terms(spec, workload, "ddp")["backward_start"]
    # at backward start under checkpointing: the last layer's recomputed casts plus lm_head's
    assert start["autocast_weight_copies"] - 2.0 * spec.params_per_layer == counted
    # without checkpointing every matmul weight's copy is held, lm_head's among them, once
    held = activation_terms(spec, Workload(**{**workload.__dict__, "grad_checkpointing": False}), "ddp")
    matmuls = spec.params_total - spec.params_embedding + (VOCAB * HIDDEN if tied else 0)
    assert held["backward_start"]["autocast_weight_copies"] == 2.0 * matmuls
