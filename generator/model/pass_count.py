"""HBM bytes of a decoder layer's memory-bound passes, counted from the ops its own code runs (ModelSpec.layer_saved
.pass_bytes): everything between its GEMMs and its attention kernel (norms, residual adds, RoPE, the MLP's
activation, biases, casts, an MoE's gathers and scatters, a hybrid's recurrent scan in PyTorch).

The count runs with model.saved_count's forward on the meta device: a TorchDispatchMode sees each aten op, and an op
that is neither a GEMM nor attention, nor a view (which moves nothing), is charged the bytes of its tensor inputs and
outputs, one read and one write each, as an unfused kernel moves them on the GPU; a factory that only allocates, and
an op whose outputs all share an input's storage (_unsafe_view), are charged nothing. On transformers' Mistral and
Qwen3 layers this gives 37,170 and 48,930 bytes a token where the hand count of estimate.passes (each op of the llama
layer, written out) gives 37,248 and 48,768; on StarCoder2's GELU MLP and LayerNorms 15,892 where the llama formula
gave 38,528, on Gemma-2's four norms and softcapping 59,780 against 37,248 (tiny configs, hidden 256, at 512 tokens;
tests/test_model_pass_count.py). At their released widths Qwen3-8B reads 0.995 of the formula, OLMoE 1.07,
Qwen3-30B-A3B 1.06, Qwen1.5-MoE 1.11 and StarCoder2 0.39. Torch is imported only when sizing builds a model."""

from __future__ import annotations

from collections import Counter

NOT_PASSES = (
    "mm", "addmm", "bmm", "baddbmm", "_grouped_mm", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
)  # fmt: skip
"""aten ops priced elsewhere: the GEMMs (estimate.operators) and attention (its own rows)."""
ALLOCATE_ONLY = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided")
"""Factories that allocate without writing (charged nothing)."""


def counter(where):
    """A TorchDispatchMode that adds each memory-bound op's bytes to `totals[where()]` (where() None: not counted)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class PassTraffic(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.totals: Counter = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            owner = where()
            name = func.overloadpacket.__name__
            if owner is None or func.is_view or name in NOT_PASSES or name in ALLOCATE_ONLY:
                return out
            inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
            outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
            if not func._schema.is_mutable and _aliases(outputs, inputs):  # a view by another name (_unsafe_view)
                return out
            self.totals[owner] += sum(t.numel() * t.element_size() for t in inputs + outputs)
            return out

    return PassTraffic()


def _aliases(outputs, inputs) -> bool:
    """Every output shares storage with an input (nothing written)."""
    held = {t.untyped_storage()._cdata for t in inputs}
    return bool(outputs) and all(t.untyped_storage()._cdata in held for t in outputs)
