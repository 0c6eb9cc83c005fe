"""The activation formula against what autograd really saves: one forward + loss of a tiny Mistral on CPU under bf16
autocast (what Accelerate's mixed_precision bf16 does), every saved tensor recorded through saved_tensors_hooks and
counted once per storage while it is still held by the graph. Pins estimate.activations' per-layer bytes (LoRA's
adapter copies, frozen norms, SDPA's repeated k/v under a mask) to behaviour rather than to a constant."""

from __future__ import annotations

import weakref
from collections import Counter

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from generator.estimate import Workload  # noqa: E402
from generator.estimate.activations import activation_terms  # noqa: E402
from generator.model import spec_from_config  # noqa: E402

SEQ = 512
LAYERS = 4
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]  # bench/scripts/common.py


class _Box:
    """What the graph holds instead of the tensor, so the count forgets a storage when its last holder is freed."""

    __slots__ = ("t", "__weakref__")


def saved_bytes_per_layer(model, inputs: dict) -> list[int]:
    """Bytes of unique storages each decoder layer's modules saved for backward and still hold after the loss,
    leaving out parameters and autocast's bf16 copies of them (the estimator counts weights elsewhere)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    stack, owner, holders = ["<root>"], {}, Counter()
    weight_shapes: dict[str, set] = {}
    for name, mod in model.named_modules():
        weight_shapes[name] = {s for p in mod.parameters(recurse=False) for s in (p.shape, p.shape[::-1])}
        mod.register_forward_pre_hook(lambda m, a, name=name: stack.append(name))  # append returns None
        mod.register_forward_hook(lambda m, a, o: stack.__delitem__(-1))  # returns None: the output stays

    def release(key):
        holders[key] -= 1
        if not holders[key]:
            del owner[key]

    def pack(t):
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key not in params and tuple(t.shape[::-1]) not in weight_shapes.get(stack[-1], ()):
            owner.setdefault(key, (stack[-1], storage.nbytes()))
            holders[key] += 1
        box = _Box()
        box.t = t
        if key in owner:
            weakref.finalize(box, release, key)
        return box

    with (
        torch.autograd.graph.saved_tensors_hooks(pack, lambda box: box.t),
        torch.autocast("cpu", dtype=torch.bfloat16),
    ):
        loss = model(**inputs).loss
    per_layer = [0] * LAYERS
    for name, nbytes in owner.values():
        parts = name.split(".layers.")
        if len(parts) == 2:
            per_layer[int(parts[1].split(".")[0])] += nbytes
    del loss
    return per_layer


def tiny(method: str, load_dtype: str, window: int | None):
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    cfg = MistralConfig(
        vocab_size=1000,
        hidden_size=256,
        intermediate_size=896,
        num_hidden_layers=LAYERS,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=SEQ,
        sliding_window=window,
        tie_word_embeddings=False,
        use_cache=False,
    )
    model = MistralForCausalLM._from_config(cfg, attn_implementation="sdpa").to(
        torch.bfloat16 if load_dtype == "bf16" else torch.float32
    )
    if method == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=TARGETS, task_type="CAUSAL_LM")
        )
    return model, spec_from_config(cfg.to_dict(), "tiny")


def plain_loop_inputs() -> tuple[dict, int | None]:
    ids = torch.randint(0, 1000, (1, SEQ))
    return {"input_ids": ids, "labels": ids}, None


def train_py_inputs() -> tuple[dict, int | None]:
    """Packed 64-token documents: restarting position_ids, -100 on each document's first two tokens (the prompt)."""
    ids = torch.randint(0, 1000, (1, SEQ))
    labels = ids.clone()
    labels[:, 0::64] = labels[:, 1::64] = -100
    pos = torch.arange(SEQ).remainder(64).unsqueeze(0)
    n = int((labels != -100).sum())
    return {"input_ids": ids, "labels": labels, "position_ids": pos, "num_items_in_batch": n}, 64


@pytest.mark.parametrize(
    ("method", "load_dtype", "window", "make_inputs"),
    [
        ("lora", "bf16", SEQ, plain_loop_inputs),  # the custom loop's row: a window mask, k/v repeated
        ("lora", "bf16", None, train_py_inputs),  # train.py: packed documents, a block-diagonal mask
        ("lora", "bf16", None, plain_loop_inputs),  # no mask: is_causal with enable_gqa, k/v kept per kv head
        ("lora", "fp32", SEQ, plain_loop_inputs),  # fp32 base under autocast: fp32 residual stream
        ("full", "bf16", SEQ, plain_loop_inputs),  # trained norms and linears keep their own inputs
    ],
)
def test_layer_activations_match_saved_tensors(method, load_dtype, window, make_inputs):
    model, spec = tiny(method, load_dtype, window)
    inputs, doc = make_inputs()
    counted = saved_bytes_per_layer(model, inputs)
    workload = Workload(
        method=method, seq_len=SEQ, grad_checkpointing=False, load_dtype=load_dtype, lora_r=16, doc_tokens=doc
    )
    fwd = activation_terms(spec, workload, "ddp")["forward_end"]
    predicted = (fwd["activations"] + fwd["attention_bias"]) / LAYERS
    # Layer 0 also holds the rotary cos/sin every layer shares; the others hold only their own.
    for layer in counted[1:]:
        assert predicted == pytest.approx(layer, rel=0.01)
