"""The activation formula against what autograd really saves: one forward + loss of a tiny Mistral on CPU under bf16
autocast (what Accelerate's mixed_precision bf16 does), every saved tensor recorded through saved_tensors_hooks and
counted once per storage while it is still held by the graph. Pins estimate.activations' per-layer bytes (LoRA's
adapter copies, frozen norms, SDPA's repeated k/v under a mask) to behaviour rather than to a constant."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from bench.scripts.saved_audit import saved_bytes_per_layer as counted_per_layer  # noqa: E402
from generator.estimate import Workload  # noqa: E402
from generator.estimate.activations import activation_terms  # noqa: E402
from generator.estimate.lora_saved import DROPOUT_MASK_BYTES  # noqa: E402
from generator.model import spec_from_config  # noqa: E402

SEQ = 512
LAYERS = 4
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]  # bench/scripts/common.py
TINY = dict(vocab_size=1000, hidden_size=256, num_hidden_layers=LAYERS, num_attention_heads=8, num_key_value_heads=2,
            max_position_embeddings=SEQ, tie_word_embeddings=False, use_cache=False)  # fmt: skip
"""The counted models' shared widths (each test's config adds its MLP width, window or experts)."""


def saved_bytes_per_layer(model, inputs: dict, keep_weight_shapes: bool = False) -> list[int]:
    """bench/scripts/saved_audit.saved_bytes_per_layer over LAYERS layers under CUDA's bf16 autocast policy."""
    return counted_per_layer(model, inputs, LAYERS, keep_weight_shapes)


def tiny(method: str, load_dtype: str, window: int | None, targets=TARGETS, dropout: float = 0.0):
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    cfg = MistralConfig(**TINY, intermediate_size=896, sliding_window=window)
    model = MistralForCausalLM._from_config(cfg, attn_implementation="sdpa").to(
        torch.bfloat16 if load_dtype == "bf16" else torch.float32
    )
    if method == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model,
            LoraConfig(r=16, lora_alpha=32, lora_dropout=dropout, target_modules=targets, task_type="CAUSAL_LM"),
        )
    model.train()  # dropout keeps its mask only in training mode, as in a real step
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


def trl_padding_free_inputs() -> tuple[dict, int | None]:
    """What TRL's padding-free collator hands the model for a micro-batch of 2 packed 256-token bins of 64-token
    documents: one row of 512 tokens, position_ids restarting at every document, no attention mask."""
    ids = torch.randint(0, 1000, (1, SEQ))
    pos = torch.arange(SEQ).remainder(64).unsqueeze(0)
    labels = ids.clone()
    labels[:, 0::64] = -100
    return {"input_ids": ids, "labels": labels, "position_ids": pos}, 64


def test_trl_lora_defaults_match_saved_tensors():
    """TRL's CLI LoRA (q_proj and v_proj, dropout 0.05) on the flattened row its padding-free packing makes: the
    adapters' copies and dropout masks, and the block-diagonal mask over the whole row (micro-batch 2 x 256)."""
    model, spec = tiny("lora", "bf16", None, targets=["q_proj", "v_proj"], dropout=0.05)
    inputs, doc = trl_padding_free_inputs()
    counted = saved_bytes_per_layer(model, inputs)
    workload = Workload(
        method="lora", seq_len=SEQ // 2, micro_batch=2, grad_checkpointing=False, load_dtype="bf16", lora_r=16,
        doc_tokens=doc, script="trainer", lora_targets=("q", "v"), lora_dropout=0.05,
    )  # fmt: skip
    fwd = activation_terms(spec, workload, "ddp")["forward_end"]
    predicted = (fwd["activations"] + fwd["attention_bias"]) / LAYERS
    # On CPU dropout keeps its mask in the input's dtype (fp32: peft casts the input to the adapters' dtype first),
    # where CUDA keeps a bool: 4 bytes counted here for each byte the estimator counts on a GPU.
    cpu_mask = (4 - DROPOUT_MASK_BYTES) * spec.hidden_size * 2 * SEQ  # q_proj's and v_proj's inputs, 512 tokens
    for layer in counted[1:]:
        assert predicted + cpu_mask == pytest.approx(layer, rel=0.01)
    # the same tokens as two separate rows would hold a quarter of the row's s^2 mask bias: the flattening shows
    separate = activation_terms(spec, Workload(**{**workload.__dict__, "script": "train.py"}), "ddp")["forward_end"]
    assert fwd["attention_bias"] == pytest.approx(2 * separate["attention_bias"])
