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


def compiled_counts(model, stack, block: int, kernel: str) -> tuple[float | None, float | None, float | None]:
    """Bytes per token block `block` of `stack` saves when compiled: every weight trained, frozen (LoRA's base), and
    trained with fp32 weights (a full fine-tune's fp32 weights and stream); each None where it cannot be traced."""
    import torch

    counts = []
    try:
        for weights, runs in ((torch.bfloat16, (True, False)), (torch.float32, (True,))):
            try:
                captured = _inputs(model, stack, block, kernel, weights)
            except Exception:  # an op the eager forward cannot run here (fp32 experts): the eager rule prices it
                captured = None
            counts += [None if captured is None else _per_token(model, stack[block], captured, t) for t in runs]
    finally:
        model.to(torch.bfloat16).requires_grad_(True)
    return tuple(counts)


def _inputs(model, stack, block: int, kernel: str, weights) -> dict:
    """What the eager forward hands block `block` (args, kwargs) with `weights`, and how many tensors it returns."""
    import torch

    from generator.model.cuda_autocast import cuda_autocast
    from generator.model.saved_count import _decoder, _set_kernel, _stand_ins

    model.to(weights).requires_grad_(False)
    captured: dict = {"weights": weights}
    hooks = (
        stack[block].register_forward_pre_hook(lambda m, a, k: captured.update(args=a, kwargs=k), with_kwargs=True),
        stack[block].register_forward_hook(
            lambda m, a, out: captured.update(own=sum(isinstance(t, torch.Tensor) for t in tree_leaves(out)))
        ),
    )
    hidden = model.get_input_embeddings().weight.shape[-1]
    embeds = torch.empty(1, TOKENS, hidden, device="meta", dtype=weights)
    try:
        with _stand_ins(lambda *a: None), cuda_autocast(), torch.no_grad():
            _set_kernel(model, kernel)
            _decoder(model)(inputs_embeds=embeds, use_cache=False)
    finally:
        for hook in hooks:
            hook.remove()
    return captured


def _per_token(model, layer, captured: dict, trained: bool) -> float | None:
    """What `layer`, given the captured inputs, saves compiled, per token; None where AOTAutograd cannot trace it."""
    from functorch.compile import aot_module, min_cut_rematerialization_partition

    from generator.model.cuda_autocast import cuda_autocast
    from generator.model.saved_count import _stand_ins

    model.to(captured["weights"]).requires_grad_(False)
    layer.requires_grad_(trained)
    state = len(list(layer.parameters())) + len(list(layer.buffers()))
    own = captured["own"]  # the block's own outputs come first among the forward graph's
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
    args, kwargs = captured["args"], dict(captured["kwargs"])
    if args:
        args = (args[0].detach().requires_grad_(True), *args[1:])
    else:
        kwargs["hidden_states"] = kwargs["hidden_states"].detach().requires_grad_(True)
    try:
        with _stand_ins(lambda *a: None), cuda_autocast():
            compiled(*args, **kwargs)
    except Exception:  # an op AOTAutograd cannot trace on meta
        return None
    return sum(saved) / TOKENS


VIEWS = frozenset({
    "view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "slice", "select", "alias", "detach",
    "unsqueeze", "squeeze", "as_strided", "split", "split_with_sizes", "unbind",
})  # fmt: skip
"""aten ops whose output shares its input's storage (the first argument's)."""


def _op(node) -> str:
    """The aten op a graph node calls, without its overload ("view" of aten.view.default); "" for no call."""
    return str(getattr(node.target, "__name__", "")).split(".")[0] if node.op == "call_function" else ""


def _base(node):
    """The graph node whose storage `node` views (itself where it is no view): through views, and a getitem of a
    view op's outputs (split's pieces)."""
    while True:
        if _op(node) in VIEWS:
            node = node.args[0]
        elif _op(node) == "getitem" and _op(node.args[0]) in VIEWS:
            node = node.args[0].args[0]
        else:
            return node


def _root(node):
    """What `node` was cast or viewed from, through any chain of casts and views."""
    while _op(node) in (*VIEWS, "_to_copy", "clone"):
        node = node.args[0]
    return node


def _nbytes(node) -> int:
    return node.meta["val"].untyped_storage().nbytes()


def _is_tensor(node) -> bool:
    import torch

    return isinstance(node.meta.get("val"), torch.Tensor)


def tree_leaves(value) -> list:
    """torch's pytree leaves (torch imported here, not at the module's top)."""
    from torch.utils._pytree import tree_leaves as leaves

    return leaves(value)
