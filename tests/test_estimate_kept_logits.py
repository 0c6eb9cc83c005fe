"""The logits a training loop holds from one step into the next, against Accelerate and a loop written as train.py's.

train.py (`out_ = model(...)`) and a plain Accelerate loop (`out = model(**batch)`) keep the last output until the next
forward returns, so its logits are alive through the next forward's loss, the peak of a checkpointed full fine-tune
(Llama-3.2-3B at 4,096 x 2 on an H100: 62.94 GB with a [tokens, vocab] fp32 block from the step before,
bench/results/memhist-llama32-full-h100-2026-12-07.json). They are fp32 because Accelerate's bf16 mixed precision
wraps the forward in convert_outputs_to_fp32. Checked on a tiny Llama on the CPU: the held logits' dtype and bytes,
that they are alive inside the next step's loss, and that the estimate's forward phase counts them."""

from __future__ import annotations

import gc
import weakref

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate")

from generator.estimate import Workload  # noqa: E402
from generator.estimate.activations import activation_terms  # noqa: E402
from generator.model import spec_from_config  # noqa: E402

VOCAB, SEQ = 1000, 32


def test_previous_logits_alive_through_next_loss_and_counted():
    from accelerate import Accelerator
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)  # fmt: skip
    accelerator = Accelerator(mixed_precision="bf16", cpu=True)
    model = LlamaForCausalLM(cfg).float()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    model, optimizer = accelerator.prepare(model, optimizer)
    held: list[weakref.ref] = []
    alive_in_loss: list[bool] = []

    def at_lm_head(module, args, output):  # the next step's loss is about to be computed from this output
        alive_in_loss.append(any(r() is not None for r in held))

    accelerator.unwrap_model(model).lm_head.register_forward_hook(at_lm_head)
    ids = torch.randint(0, VOCAB, (1, SEQ))
    for _ in range(2):  # train.py's loop, reduced to what decides the lifetime of its output
        out_ = model(input_ids=ids, labels=ids, use_cache=False)
        accelerator.backward(out_.loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        held.append(weakref.ref(out_.logits))
        gc.collect()
    assert alive_in_loss == [False, True]  # the first step has none; the second holds the first step's logits
    kept = out_.logits
    assert kept.dtype == torch.float32

    spec = spec_from_config(cfg.to_dict(), "tiny")
    terms = activation_terms(spec, Workload(method="full", load_dtype="fp32", seq_len=SEQ), "ddp")
    assert terms["forward_end"]["logits_kept"] == kept.numel() * kept.element_size()
    assert terms["backward_start"]["logits_kept"] == kept.numel() * kept.element_size()
