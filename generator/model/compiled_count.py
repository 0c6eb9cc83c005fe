"""What a compiled decoder layer keeps for backward (train.py's float8 path and --compile-layers compile each layer),
counted on the meta device at sizing beside the eager count (model.saved_count).

Why its own count: inductor's min-cut partitioner decides what a compiled layer saves, recomputing pointwise chains
from their inputs, and that is not the eager layer less a fixed part. Priced as the llama layer with Liger's shapes,
the compiled layer of 30 families counted through the partitioner on the CPU (bench/scripts/saved_audit.py
--compiled, bench/results/cpu-saved-audit-compiled-2026-12-05.json) read 0.985-1.013 for the llama-layer families
and 0.75-1.66 for the LayerNorm and GELU ones (gelu_new's fp32 chain under autocast recomputed, LayerNorms' fp32
inputs kept).

How: one decoder block of the kind the estimate prices, given the inputs the eager forward hands it, goes through
AOTAutograd (functorch.compile.aot_module) with the min-cut partitioner, under CUDA's autocast policy
(model.cuda_autocast) and the flash kernel's stand-in; the forward graph's outputs past the block's own are what it
saves. About half a second a block on a 2-core CPU (torch.compile's dynamo on meta took 50 s and gave no count). The
block's other tensor inputs (the rotary tables every layer shares), the weights and their casts are left out, as the
eager count leaves them (what is left grows with the tokens: one length gives it per token). Torch is imported only
here, only when sizing builds a model."""

from __future__ import annotations

TOKENS = 256
"""Sequence length of the count (batch 1). What a block saves whatever its tokens is its weights and their casts,
which are left out, so one length gives the bytes per token."""


def compiled_per_token(model, stack, block: int, kernel: str, trained: bool, weights=None) -> float | None:
    """Bytes per token block `block` of `stack` saves when compiled, trained (every weight) or frozen (LoRA's base),
    with `weights` (fp32: a full fine-tune's fp32 weights and stream; bf16 where None); None where it cannot be
    traced."""
    import torch

    weights = weights or torch.bfloat16
    try:
        return _saved_bytes(model, stack, block, kernel, trained, weights, TOKENS) / TOKENS
    except Exception:  # an op AOTAutograd cannot trace on meta: the eager count's rule prices the layer
        return None
    finally:
        model.to(torch.bfloat16).requires_grad_(True)


def _saved_bytes(model, stack, block: int, kernel: str, trained: bool, weights, tokens: int) -> int:
    import torch
    from functorch.compile import aot_module, min_cut_rematerialization_partition

    from generator.model.cuda_autocast import cuda_autocast
    from generator.model.saved_count import _decoder, _set_kernel, _stand_ins

    model.to(weights).requires_grad_(False)
    captured: dict = {}
    hook = stack[block].register_forward_pre_hook(
        lambda m, args, kwargs: captured.update(args=args, kwargs=kwargs), with_kwargs=True
    )
    hidden = model.get_input_embeddings().weight.shape[-1]
    embeds = torch.empty(1, tokens, hidden, device="meta", dtype=weights)
    try:
        with _stand_ins(lambda *a: None), cuda_autocast(), torch.no_grad():
            _set_kernel(model, kernel)
            _decoder(model)(inputs_embeds=embeds, use_cache=False)
    finally:
        hook.remove()
    layer = stack[block].requires_grad_(trained)
    first = captured["args"][0] if captured["args"] else captured["kwargs"]["hidden_states"]
    state = len(list(layer.parameters())) + len(list(layer.buffers()))
    saved: list[int] = []

    def forward_graph(gm, example_inputs):
        nodes = list(gm.graph.nodes)
        out = next(n for n in nodes if n.op == "output").args[0]
        inputs = [n for n in nodes if n.op == "placeholder"]
        # the block's own inputs but the hidden states (the rotary tables all layers share), and its weights
        shared = [n for i, n in enumerate(inputs) if i < state or (i > state and _is_tensor(n))]
        # a view keeps its base's storage alive: each storage once, as the eager count's saved-tensor hooks see it;
        # a weight's casts (autocast's bf16 copy of an fp32 weight, a router's fp32 one) are priced with the weights
        bases = {_base(node) for node in out[own:] if hasattr(node, "meta") and _is_tensor(node)}
        saved.extend(_nbytes(base) for base in bases if base not in shared and _root(base) not in shared[:state])
        return gm

    compiled = aot_module(layer, fw_compiler=forward_graph, bw_compiler=lambda gm, example_inputs: gm,
                          partition_fn=min_cut_rematerialization_partition)  # fmt: skip
    args = (first.detach().requires_grad_(True), *captured["args"][1:])
    kwargs = {k: v for k, v in captured["kwargs"].items() if k != "hidden_states" or not captured["args"]}
    if not captured["args"]:
        kwargs["hidden_states"] = args[0]
        args = ()
    with _stand_ins(lambda *a: None), cuda_autocast():
        with torch.no_grad():  # the block's own outputs come first among the forward graph's
            own = len(
                [t for t in torch.utils._pytree.tree_leaves(layer(*args, **kwargs)) if isinstance(t, torch.Tensor)]
            )
        compiled(*args, **kwargs)
    return sum(saved)


VIEWS = frozenset({
    "view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "slice", "select", "alias", "detach",
    "unsqueeze", "squeeze", "as_strided", "split", "split_with_sizes", "unbind",
})  # fmt: skip
"""aten ops whose output shares its input's storage (the first argument's)."""


def _base(node):
    """The graph node whose storage `node` views (itself where it is no view)."""
    while node.op == "call_function" and str(getattr(node.target, "__name__", "")).split(".")[0] in VIEWS:
        node = node.args[0]
    while node.op == "call_function" and getattr(node.target, "__name__", "") == "getitem":
        parent = node.args[0]
        if str(getattr(parent.target, "__name__", "")).split(".")[0] not in VIEWS:
            break
        node = parent.args[0]
    return node


def _root(node):
    """What `node` was cast or viewed from, through any chain of casts and views."""
    while node.op == "call_function" and (
        str(getattr(node.target, "__name__", "")).split(".")[0] in (*VIEWS, "_to_copy", "clone")
    ):
        node = node.args[0]
    return node


def _nbytes(node) -> int:
    value = node.meta["val"]
    return value.untyped_storage().nbytes()


def _is_tensor(node) -> bool:
    import torch

    return isinstance(node.meta.get("val"), torch.Tensor)
