"""How many aten ops one decoder layer dispatches in a training step, forward and backward, counted on the meta device
at sizing (ModelSpec.layer_ops): the host's share of a layer, for a model the compute table has no host rows of.

Why a count: an eager step whose GPU work is short waits on the host issuing its kernels, and the table's host rows
time transformers' tiny Mistral layer (generator/probe/compute_host.py). Another model's layer issues more or fewer
calls: StarCoder2's and Phi's LoRA adapt four and three projections where Mistral's adapts seven, Gemma-3 and OLMo-2
run extra norms. On the CPU, where a tiny layer's time is its dispatch, the probe's own host rows of eleven dense
families (21 rows, full and LoRA; bench/results/cpu-host-ops-2026-12-05.json) read 14% mean and 56% worst from the
Mistral layer's forward as it is, and 6.9% and 20% from it scaled by the ratio of the two layers' ops counted here,
every op the dispatcher sees (views included: on the CPU they cost the host about as much per call as the rest).
Over the whole step 15% and 72% as it is, 8.8% and 35% scaled, where the CPU's step also runs AdamW's per-tensor
loop and per-tensor norms for clipping, which a GPU's fused AdamW and foreach norm do not and this count leaves out.

Counted as the host rows run a layer: transformers' code under CUDA's autocast policy (model.cuda_autocast), SDPA as
the flash kernel (count_attention's stand-ins), an MoE's experts on transformers' grouped_mm path; a layer's ops are the
difference between the decoder run through the block after the first of the kind and through that first block, so
the embedding, the mask and the final norm drop out. Full: fp32 weights trained (train.py's full fine-tune; an MoE's
in bf16, as train.py casts its experts); frozen: bf16 weights, the input requiring grad (LoRA's base); an adapter:
peft's LoRA on one bf16 Linear (rank 16, with and without dropout) beyond the Linear's own ops (ADAPTER_OPS). The
reference is the probe's tiny Mistral counted the same way, once a process. Torch is imported only when sizing builds
a model; peft never is."""

from __future__ import annotations

from functools import cache

from generator.model.count_attention import ATTENTION, counted_kernel, decoder, set_kernel, stand_ins
from generator.model.cuda_autocast import cuda_autocast
from generator.model.types import LayerOps

TOKENS = 16
"""Tokens of the count: a layer's ops do not depend on them (a grouped_mm path routes every token in one call)."""
REFERENCE = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                 vocab_size=512, max_position_embeddings=256)  # fmt: skip
"""The probe's tiny Mistral (compute_host's HIDDEN, INTER, HEADS, KV_HEADS, HEAD_DIM)."""


def op_counter():
    """A TorchDispatchMode counting the aten ops dispatched while it is on (`.n`), views included."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += 1
            return func(*args, **(kwargs or {}))

    return Ops()


def _forward_backward(forward) -> tuple[int, int]:
    """(forward, backward) ops of `forward()` under CUDA's autocast policy and of the backward of its output's sum."""
    counted_forward, counted_backward = op_counter(), op_counter()
    with cuda_autocast(), counted_forward:
        out = forward()
    loss = out.float().sum()
    with counted_backward:
        loss.backward()
    return counted_forward.n, counted_backward.n


def _step(model, stack, depth: int, trained: bool, kernel: str, moe: bool) -> tuple[int, int]:
    """(forward, backward) ops of the decoder cut to its first `depth` blocks. A trained MoE's in bf16: train.py casts
    its experts to bf16 for each forward (training/moe.py), where fp32 ones would leave transformers' grouped_mm path
    (the probe's host rows build it so too: compute_host_model)."""
    import torch

    rest = list(stack)[depth:]
    del stack[depth:]
    try:
        weights = torch.float32 if trained and not moe else torch.bfloat16
        model.to(weights).requires_grad_(trained)
        hidden = model.get_input_embeddings().weight.shape[-1]
        embeds = torch.empty(1, TOKENS, hidden, device="meta", dtype=weights, requires_grad=True)
        with stand_ins(lambda *a: None):
            set_kernel(model, kernel)
            return _forward_backward(lambda: decoder(model)(inputs_embeds=embeds, use_cache=False).last_hidden_state)
    finally:
        stack.extend(rest)


def _per_layer(model, stack, first: int, kernel: str, moe: bool = False) -> tuple[tuple[float, float], ...]:
    """((forward, backward) trained, (forward, backward) frozen) of the block after `first`: the decoder through it
    less the decoder through `first` (the first block of a model keeps the rotary tables it shares)."""
    out = []
    for trained in (True, False):
        (f1, b1), (f2, b2) = (_step(model, stack, first + d, trained, kernel, moe) for d in (1, 2))
        out.append((float(f2 - f1), float(b2 - b1)))
    return out[0], out[1]


ADAPTER_OPS = (10.0, 20.0)
"""(forward, backward) aten ops peft's LoRA adds to one bf16 Linear under CUDA's autocast, without dropout (peft
0.21: the input cast to the adapter's fp32, A, B, the scale and the add, and their backward). Written down rather
than counted at sizing: importing peft brings bitsandbytes, whose CPU backend reaches for the Hub at import, which
the planning path must not; tests/test_model_op_count.py counts it with the installed peft (adapter_ops)."""
ADAPTER_DROPOUT_OPS = (14.0, 21.0)
"""The same with LoRA dropout (its mask and multiply, forward and backward)."""


def adapter_ops(dropout: float) -> tuple[float, float]:
    """(forward, backward) ops peft's LoRA adds to one bf16 Linear under autocast, counted with the installed peft
    (what ADAPTER_OPS and ADAPTER_DROPOUT_OPS hold)."""
    import torch
    from peft import LoraConfig, get_peft_model

    def counted(lora: bool) -> tuple[int, int]:
        with torch.device("meta"):
            model = torch.nn.Sequential()
            model.add_module("proj", torch.nn.Linear(64, 64, bias=False, dtype=torch.bfloat16))
        model.requires_grad_(False)
        if lora:
            config = LoraConfig(r=16, lora_alpha=32, lora_dropout=dropout, target_modules=["proj"])
            model = get_peft_model(model, config).train()
        x = torch.empty(4, 64, device="meta", dtype=torch.bfloat16, requires_grad=True)
        return _forward_backward(lambda: model(x))

    (f0, b0), (f1, b1) = counted(False), counted(True)
    return float(f1 - f0), float(b1 - b0)


@cache
def _reference() -> tuple[tuple[float, float], ...]:
    """The tiny Mistral's layer (the probe's host rows), counted as any model's."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model("mistral", num_hidden_layers=4, **REFERENCE)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    model.train()
    return _per_layer(model, model.model.layers, 0, ATTENTION)


def layer_ops(model, stack, kind: list[int] | None, attentions: tuple[str, ...]) -> LayerOps | None:
    """The counts for `model` (built on meta) whose decoder blocks are `stack`, of the block after the first of `kind`
    (an MoE's expert blocks); None where they cannot be taken (fewer blocks, an op meta cannot run)."""
    first = min(kind) if kind else 0
    if first + 2 > len(stack):
        return None
    model.train()
    try:
        full, frozen = _per_layer(model, stack, first, counted_kernel(model, attentions), moe=kind is not None)
        ref_full, ref_frozen = _reference()
    except Exception:  # a block that needs more than its input, an op with no meta kernel: the Mistral rows price it
        return None
    return LayerOps(full, frozen, ADAPTER_OPS, ADAPTER_DROPOUT_OPS, ref_full, ref_frozen)
