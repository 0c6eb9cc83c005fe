"""What a compiled decoder layer keeps for backward (train.py's float8 path and --compile-layers compile each layer),
counted on the meta device at sizing beside the eager count (model.saved_count).

Why its own count: inductor's min-cut partitioner decides what a compiled layer saves, recomputing pointwise chains
from their inputs, and that is not the eager layer less a fixed part. Priced as the llama layer with Liger's shapes,
the compiled layer of 30 families counted through the partitioner on the CPU (bench/scripts/saved_audit.py
--compiled, bench/results/cpu-saved-audit-compiled-2026-12-05.json) read 0.985-1.013 for the llama-layer families
and 0.75-1.66 for the LayerNorm and GELU ones (gelu_new's fp32 chain under autocast recomputed, LayerNorms' fp32
inputs kept); priced from this count, 0.995-1.001 for 24 dense families and MoEs (cpu-saved-audit-compiled-2026-12-05-c
.json, the reference run with inductor's decompositions as the count is).

How: one decoder block of the kind the estimate prices, given the inputs the eager forward hands it, goes through
AOTAutograd (functorch.compile.aot_module) with inductor's decompositions and its min-cut partitioner, under CUDA's
autocast policy (model.cuda_autocast) and the flash kernel's stand-in; the forward graph's outputs past the block's
own are what it saves. About half a second a block on a 2-core CPU (torch.compile's dynamo on meta took 50 s and gave
no count). The block's other tensor inputs (the rotary tables every layer shares) and whatever the weights alone give
(their casts) are left out, as the eager count leaves them (what is left grows with the tokens: one length gives it
per token). Torch is imported only here, only when sizing builds a model.

Float8 (train.py --precision fp8): the same block with torchao's float8 Linears. Compiled, the partitioner keeps a
Linear's input cast to float8 (1 byte an element) where its bf16 input is needed by nothing else, so a float8 layer
trained keeps less than a bf16 one: on the meta device Phi's default layer 39.0 KB a token against 61.6, Mistral-7B's
98.4 against 139.4 (with fp32 weights 43.1 and 106.6). Frozen (LoRA's base) a Linear keeps no input in either
precision, so the frozen count serves both."""

from __future__ import annotations

from typing import NamedTuple

TOKENS = 256
"""Sequence length of the count (batch 1). What a block saves whatever its tokens is its weights and their casts,
which are left out, so one length gives the bytes per token."""


class Compiled(NamedTuple):
    """Bytes per token a compiled block keeps (None where not traced), and which of its GEMM modules read one tensor."""

    trained: float | None
    frozen: float | None
    trained_fp32: float | None
    fp8: float | None
    fp8_fp32: float | None
    shared_inputs: tuple[tuple[str, ...], ...]


NOT_COUNTED = Compiled(None, None, None, None, None, ())


def compiled_counts(model, stack, block: int, kernel: str, traced: bool = True) -> Compiled:
    """What block `block` of `stack` saves compiled: every weight trained, frozen (LoRA's base), trained with fp32
    weights (a full fine-tune's fp32 weights and stream), and the two trained ones with torchao's float8 Linears where
    torchao is installed; and the groups of its GEMM modules that the forward hands one tensor (q, k and v; Phi's fc1
    with them), which peft's adapters, compiled, keep one copy of. `traced` False: the groups alone (one eager
    forward), no byte count: the five traces are nine tenths of a sizing's time, and a script that compiles no layer
    never reads them (model.loading.load_model's `compiled`)."""
    import torch

    # (trained, fp8) runs at each weight dtype: the frozen block runs at bf16 only (LoRA's base)
    plan = (
        (torch.bfloat16, ((True, False), (False, False), (True, True))),
        (torch.float32, ((True, False), (True, True))),
    )
    counts, groups = [], ()
    try:
        for weights, runs in plan:
            captured = None
            try:  # the groups are the bf16 forward's: untraced, that forward alone runs
                if traced or weights is torch.bfloat16:
                    captured = _inputs(model, stack, block, kernel, weights)
            except Exception:  # an op the eager forward cannot run here (fp32 experts): the eager rule prices it
                pass
            if captured is not None and weights is torch.bfloat16:
                groups = captured["shared_inputs"]
            counts.append({run: None if captured is None or not traced
                           else _per_token(model, stack[block], captured, *run) for run in runs})  # fmt: skip
    finally:
        model.to(torch.bfloat16).requires_grad_(True)
    low, fp32 = counts
    return Compiled(low[True, False], low[False, False], fp32[True, False], low[True, True], fp32[True, True], groups)


def _inputs(model, stack, block: int, kernel: str, weights) -> dict:
    """What the eager forward hands block `block` (args, kwargs) with `weights`, how many tensors it returns, and
    which of its GEMM modules are handed the same tensor."""
    import torch

    from generator.model.count_attention import decoder, set_kernel, stand_ins
    from generator.model.cuda_autocast import cuda_autocast

    model.to(weights).requires_grad_(False)
    captured: dict = {"weights": weights}
    handed: list[tuple[str, object]] = []  # the tensors themselves, so no id is reused while they are compared
    gemms = [(name, m) for name, m in stack[block].named_modules() if name and _gemm(m)]
    hooks = (
        stack[block].register_forward_pre_hook(lambda m, a, k: captured.update(args=a, kwargs=k), with_kwargs=True),
        stack[block].register_forward_hook(
            lambda m, a, out: captured.update(own=sum(isinstance(t, torch.Tensor) for t in tree_leaves(out)))
        ),
        *(m.register_forward_pre_hook(lambda m, a, name=name: handed.append((name, a[0]))) for name, m in gemms),
    )
    hidden = model.get_input_embeddings().weight.shape[-1]
    embeds = torch.empty(1, TOKENS, hidden, device="meta", dtype=weights)
    try:
        with stand_ins(lambda *a: None), cuda_autocast(), torch.no_grad():
            set_kernel(model, kernel)
            decoder(model)(inputs_embeds=embeds, use_cache=False)
    finally:
        for hook in hooks:
            hook.remove()
    by_tensor: dict[int, list[str]] = {}
    for name, tensor in handed:
        by_tensor.setdefault(id(tensor), []).append(name)
    captured["shared_inputs"] = tuple(sorted(tuple(sorted(set(g))) for g in by_tensor.values() if len(set(g)) > 1))
    return captured


def _gemm(module) -> bool:
    """A GEMM module peft's all-linear adapts (model.meta._gemm_features)."""
    from generator.model.meta import _gemm_features

    return _gemm_features(module) is not None


def _float8(layer, weights):
    """A copy of `layer` with train.py's float8 Linears (torchao's tensorwise recipe, its default), each handed its
    input in bf16 as torchao's Float8Linear casts it under CUDA's autocast (`input.to(autocast dtype)`: the count's
    autocast is a TorchFunctionMode, which torchao's `torch.is_autocast_enabled()` does not see); None without
    torchao."""
    import copy

    import torch

    try:
        from torchao.float8.float8_linear import Float8Linear
    except ImportError:
        return None

    layer = to_float8(copy.deepcopy(layer).to(weights))
    for m in layer.modules():
        if isinstance(m, Float8Linear):
            m.register_forward_pre_hook(lambda m, a: (a[0].to(torch.bfloat16), *a[1:]))
    return layer


def to_float8(module):
    """`module` with train.py's float8 Linears in place (training/precision.py, which this package does not import:
    torchao's default tensorwise config, every Linear of a decoder block whose dims are multiples of 16); the probe's
    float8 layer rows convert with it too (probe.compute_layers)."""
    import torch
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    from generator.catalog.gpus import fp8_aligned

    def takes(m, fqn: str) -> bool:  # train.py's filter (training/precision.fp8_filter) on a decoder block
        adapter = any(part.startswith("lora_") for part in fqn.split("."))  # peft's lora_A / lora_B stay bf16
        return isinstance(m, torch.nn.Linear) and not adapter and fp8_aligned(m.in_features, m.out_features)

    return convert_to_float8_training(module, config=Float8LinearConfig(), module_filter_fn=takes)


def _per_token(model, layer, captured: dict, trained: bool, fp8: bool = False) -> float | None:
    """What `layer`, given the captured inputs, saves compiled, per token (`fp8`: with train.py's float8 Linears);
    None where AOTAutograd cannot trace it or torchao is not installed."""
    model.to(captured["weights"]).requires_grad_(False)
    if fp8:
        layer = _float8(layer, captured["weights"])
        if layer is None:
            return None
    layer.requires_grad_(trained)
    state = len(list(layer.parameters())) + len(list(layer.buffers()))
    own = captured["own"]  # the block's own outputs come first among the forward graph's
    saved: list[int] = []

    def forward_graph(gm, example_inputs):
        nodes = list(gm.graph.nodes)
        out = next(n for n in nodes if n.op == "output").args[0]
        inputs = [n for n in nodes if n.op == "placeholder"]
        # the block's own inputs but the hidden states (the rotary tables all layers share)
        shared = {n for i, n in enumerate(inputs) if i > state and _is_tensor(n)}
        # what the weights alone give (autocast's bf16 copy of an fp32 weight, a router's fp32 one, float8's cast
        # weight and its transpose) does not grow with the tokens: priced with the weights, as the eager count does
        grows = set(inputs[state:])
        for node in nodes:
            if node.op == "call_function" and any(i in grows for i in node.all_input_nodes):
                grows.add(node)
        # a view keeps its base's storage alive: each storage once, as the eager count's saved-tensor hooks see it
        bases = {_base(node) for node in out[own:] if hasattr(node, "meta") and _is_tensor(node)}
        saved.extend(_nbytes(base) for base in bases if base in grows and base not in shared)
        return gm

    try:
        partitioned(layer, captured, forward_graph)
    except Exception:  # an op AOTAutograd cannot trace on meta
        return None
    return sum(saved) / TOKENS


def partitioned(layer, captured: dict, forward_graph, backward_graph=None) -> None:
    """Run `layer` on the captured inputs (the hidden states requiring grad) through AOTAutograd as inductor hands it
    a graph, handing the partitioned forward graph to `forward_graph`; with `backward_graph`, the backward runs too
    and its graph goes there (bench/scripts/fp8_graph_casts.py reads both)."""
    from functorch.compile import aot_module, min_cut_rematerialization_partition
    from torch._inductor.decomposition import select_decomp_table

    from generator.model.count_attention import stand_ins
    from generator.model.cuda_autocast import cuda_autocast

    # inductor's own decompositions (torch._inductor.compile_fx hands aot_autograd the same table): the partitioner
    # then sees a LayerNorm and a GELU as the pointwise chains inductor compiles, and recomputes them rather than keep
    # their fp32 intermediates (Phi's default layer: 98.4 KB a token kept without them, 61.6 with; one H200 left
    # room for about 66 (bench/results/h200-x1-families-layernorm-2026-12-05.json); Mistral's 139.4 either way)
    compiled = aot_module(layer, fw_compiler=forward_graph, bw_compiler=backward_graph or (lambda gm, inputs: gm),
                          partition_fn=min_cut_rematerialization_partition,
                          decompositions=select_decomp_table())  # fmt: skip
    args, kwargs = captured["args"], dict(captured["kwargs"])
    if args:
        args = (args[0].detach().requires_grad_(True), *args[1:])
    else:
        kwargs["hidden_states"] = kwargs["hidden_states"].detach().requires_grad_(True)
    with stand_ins(lambda *a: None), cuda_autocast():
        out = compiled(*args, **kwargs)
        if backward_graph is not None:
            (out[0] if isinstance(out, tuple) else out).float().sum().backward()


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


def _nbytes(node) -> int:
    return node.meta["val"].untyped_storage().nbytes()


def _is_tensor(node) -> bool:
    import torch

    return isinstance(node.meta.get("val"), torch.Tensor)


def tree_leaves(value) -> list:
    """torch's pytree leaves (torch imported here, not at the module's top)."""
    from torch.utils._pytree import tree_leaves as leaves

    return leaves(value)
