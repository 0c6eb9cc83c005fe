"""Sizing by instantiating a config on the meta device: the fallback for architectures the closed-form counter does not
know. Imports transformers lazily, so it is never on the planning path for known families."""

from __future__ import annotations

import contextlib
import copy
import logging
from typing import NamedTuple

from generator.errors import UserError
from generator.model.config_dims import (
    DIM_KEYS,
    expert_count,
    is_expert_tensor,
    odd_layout,
    read_dim,
    recurrent_layers,
)
from generator.model.count_attention import decoder
from generator.model.op_count import layer_ops
from generator.model.saved_count import layer_saved
from generator.model.saved_storages import SavedStorages
from generator.model.types import LayerOps, LayerSaved, positions_limit

QUIET_LOGGERS = ("torchao", "torch.utils._pytree")
"""Loggers silenced below ERROR while the model is built: transformers imports torchao where it is installed, and on
the planning path torchao's import notes (its CUDA kernels not loading on a machine without them; a deprecation torch
logs for torchao's enums) say nothing about the plan. train.py, which uses torchao, still shows them."""


class MetaCounts(NamedTuple):
    total: int
    """Every parameter, a tied weight once."""
    experts: int
    """Parameters of fused MoE experts (is_expert_tensor: transformers 5 holds an MoE layer's experts as
    [experts, out, in] tensors of one module, `experts` the config's expert_count); none for a dense model."""
    attentions: tuple[str, ...]
    """Attention kernels the model class loads with (ModelSpec.attentions): eager, plus sdpa and flex where its
    _supports_sdpa / _supports_flex_attn say so."""
    dims: dict
    """DIM_KEYS as the config object answers them (None where it has no such attribute), and the checkpoint's
    architectures."""
    layer_cls: str | None
    """Class name of the language model's repeated decoder block (what FSDP wraps), found in the built model: a
    multimodal checkpoint's architecture name says nothing of it."""
    linear_names: tuple[str, ...] | None
    """Names of the GEMM modules in one decoder block (q_proj, qkv_proj, c_attn ...; _gemm_features): what peft's
    target_modules and its all-linear match there."""
    qk_norm: bool = False
    """The block has modules named q_norm and k_norm (ModelSpec.qk_norm)."""
    linears: tuple[tuple[str, int, int, int], ...] = ()
    """Every GEMM module of the decoder blocks: (name within its block, in, out, blocks that have it) (ModelSpec.
    layer_linears)."""
    expert_blocks: int = 0
    """Decoder blocks holding fused expert tensors (ModelSpec.expert_layers)."""
    experts_layout: tuple[str, ...] = ()
    """The experts' layout flags that differ from EXPERTS_LAYOUT (ModelSpec.experts_layout)."""
    norms: tuple[tuple[str, int, float, float], ...] = ()
    """The decoder block's norms, counted on the CPU (ModelSpec.norms)."""
    position_table: bool = False
    """The decoder looks absolute positions up in a table of max_position_embeddings rows (GPT-2's wpe, OPT's
    embed_positions; ModelSpec.position_table)."""
    not_linear: tuple[str, ...] = ()
    """Names within their block of the GEMM modules in `linears` that are not nn.Linear (transformers' Conv1D in
    GPT-2 and OpenAI-GPT): peft adapts them, torchao's float8 conversion leaves them bf16 (ModelSpec.not_linear)."""
    saved: LayerSaved | None = None
    """What a decoder layer keeps for backward, counted on meta (model.saved_count; ModelSpec.layer_saved)."""
    ops: LayerOps | None = None
    """Aten ops a decoder layer dispatches, and the probe's Mistral layer's (model.op_count; ModelSpec.layer_ops)."""


def class_attentions(cls) -> tuple[str, ...]:
    """The attention kernels a transformers model class loads with, as Workload.attention values."""
    supported = {"sdpa": cls._supports_sdpa, "flex": cls._supports_flex_attn, "eager": True}
    return tuple(kernel for kernel, ok in supported.items() if ok)


def count_params_meta(config_dict: dict) -> int:
    """Exact parameter count (tied weights once) of AutoModelForCausalLM built from `config_dict` with no memory; the
    decoder layer's counts (saved tensors traced eager and compiled: seconds) are not needed for it and not made."""
    return meta_counts(config_dict, count_layer=False).total


def meta_counts(
    config_dict: dict, name: str = "the model", count_layer: bool = True, compiled: bool = True
) -> MetaCounts:
    """Counts, attention kernels and dimensions of the model built on the meta device. transformers failing to build
    it (a model_type it does not know, a config it cannot complete) is one UserError line. `count_layer` False leaves
    out what one decoder layer dispatches and keeps (`ops`, `saved`); `compiled` False, what it keeps compiled
    (LayerSaved.compiled_counted)."""
    with _quiet(QUIET_LOGGERS):
        import transformers
        from accelerate import init_empty_weights
        from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(config_dict)
    model_type = cfg.pop("model_type")
    cfg = {k: v for k, v in cfg.items() if not k.startswith("_")}
    try:
        config = AutoConfig.for_model(model_type, **cfg)
        # include_buffers: a module that fills a tensor in __init__ (DeepSeek-V3's, at 30 GB) would otherwise allocate
        # it for real before init_empty_weights moves it to meta
        with init_empty_weights(include_buffers=True), _quiet(QUIET_LOGGERS):
            model = AutoModelForCausalLM.from_config(config)
    except Exception as exc:  # transformers' own checks: ValueError, KeyError, TypeError, AssertionError ...
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise UserError(
            f"{name}: transformers {transformers.__version__} cannot build model_type {model_type!r} from this "
            f"config.json ({type(exc).__name__}: {first}); pass a complete config.json, or a preset"
        ) from None
    # accelerate's init_empty_weights re-creates parameters on meta after transformers 5 tied them, so a tied lm_head
    # would be counted twice; tying again restores the shared Parameter (checked with transformers 5.x, test pins it).
    model.tie_weights()
    # parameters() yields a tied weight once.
    params = list(model.parameters())
    attentions = class_attentions(type(model))
    text = config.get_text_config(decoder=True)
    dims = {key: read_dim(text, key) for key in DIM_KEYS}
    dims["architectures"] = getattr(config, "architectures", None)
    if dims["tie_word_embeddings"] is None:
        dims["tie_word_embeddings"] = getattr(config, "tie_word_embeddings", False)
    routed = expert_count(dims)
    experts = sum(p.numel() for p in params if is_expert_tensor(p.shape, routed))
    layers = dims.get("num_hidden_layers")
    uniform, names, qk_norm, linears, expert_blocks, not_linear = _decoder_block(model, layers, routed)
    block = uniform[0] if uniform is not None else None
    cls_name = type(block).__name__ if block is not None else None
    counts = MetaCounts(
        sum(p.numel() for p in params), experts, attentions, dims, cls_name, names, qk_norm, linears,
        len(expert_blocks), _experts_layout(model, routed), _norms(block),
        _position_table(model, dims.get("max_position_embeddings")), not_linear,
    )  # fmt: skip
    if not count_layer or uniform is None or len(uniform) != layers:
        return counts
    # an MoE's per-layer terms are its expert layers' (DeepSeek's first dense layers are not counted among them);
    # the list is the one the experts were found in, since it is `layers` long
    kind = list(expert_blocks) if experts and expert_blocks else None
    with _quiet(QUIET_LOGGERS + ("transformers",)):  # the count last: it casts the model and switches its attention
        recurrent = recurrent_layers(dims)
        share = 1 - recurrent / layers if recurrent else None
        ops = layer_ops(model, uniform, kind, attentions) if share is None else None  # not a hybrid's mix
        return counts._replace(ops=ops, saved=layer_saved(model, uniform, attentions, kind, share, compiled))


def _norms(block) -> tuple[tuple[str, int, float, float], ...]:
    """(leaf name, width, bytes per element saved with a trained weight, with a frozen one) of each norm module of
    the decoder block (a class named ...Norm), each run once on the CPU on a small bf16 input as its class computes
    it: what it keeps for backward, counted once per storage, parameters left out. Empty where there is no uniform
    block (None) or a norm cannot run alone."""
    import torch

    out = []
    for name, norm in block.named_modules() if block is not None else ():
        if not type(norm).__name__.endswith("Norm") or getattr(norm, "weight", None) is None:
            continue  # a weightless norm (Llama-4's q/k L2 norm) names no width: left to the formula
        width = int(norm.weight.shape[-1])
        try:
            cpu = copy.deepcopy(norm).to_empty(device="cpu").to(torch.bfloat16)
            torch.nn.init.ones_(cpu.weight)
            bytes_per = [_saved_per_element(cpu, width, trained) for trained in (True, False)]
        except Exception:  # a norm that needs more than its input (a mask, a second tensor): not counted
            return ()
        out.append((name.rsplit(".", 1)[-1], width, *bytes_per))
    return tuple(out)


def _saved_per_element(norm, width: int, trained: bool) -> float:
    import torch

    norm.requires_grad_(trained)
    x = torch.randn(2, 8, width, dtype=torch.bfloat16, requires_grad=True)
    saved = SavedStorages(norm, lambda: None)
    with saved.hooks():
        y = norm(x)
    kept = sum(saved.by_owner().values())
    del y
    return kept / x.numel()


def _experts_layout(model, experts: int) -> tuple[str, ...]:
    """The non-default layout flags of the model's fused-experts modules (those holding expert tensors)."""
    odd: set[str] = set()
    for m in model.modules():
        if any(is_expert_tensor(p.shape, experts) for p in m.parameters(recurse=False)):
            odd.update(odd_layout(m))
    return tuple(sorted(odd))


def _position_table(model, positions) -> bool:
    """Whether the language model holds an embedding table of `positions` rows (or two more: OPT and BioGPT offset
    theirs by 2) beside its token embeddings: learned or sinusoidal absolute positions, looked up by index."""
    if not positions_limit(positions):
        return False
    tokens = model.get_input_embeddings()
    return any(
        m is not tokens and 0 <= getattr(m, "num_embeddings", -1) - positions <= 2 for m in decoder(model).modules()
    )


@contextlib.contextmanager
def _quiet(names: tuple[str, ...]):
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _decoder_block(
    model, layers=None, experts: int = 0
) -> tuple[object, tuple[str, ...] | None, bool, tuple, tuple[int, ...], tuple]:
    """(the longest ModuleList of one class inside the language model (count_attention.decoder: a
    multimodal model's text decoder, whose vision tower has modules of its own), its block's GEMM module names,
    whether q and k are normalised, every GEMM module of all the blocks with how many blocks have it, the indices of
    the blocks holding fused experts, those GEMM modules that are not nn.Linear); the list is None where there is
    none.
    Blocks of one class can differ inside: DeepSeek's first layers and Llama-4's interleaved ones have a dense MLP
    where the others have experts and a shared expert. The GEMM modules are read from the list of `layers` blocks
    where it holds blocks of several classes (Jamba's and Zamba's attention and Mamba layers); a GEMM module is any
    nn.Linear subclass (Falcon's FalconLinear) or transformers' Conv1D (GPT-2), as for peft's all-linear."""
    language = decoder(model)
    blocks = [
        m for m in language.modules()
        if type(m).__name__ == "ModuleList" and len(m) and len({type(b) for b in m}) == 1
    ]  # fmt: skip
    stacks = [m for m in language.modules() if type(m).__name__ == "ModuleList" and len(m) == layers]
    uniform = max(blocks, key=len) if blocks else None
    # the block list itself, unless it is not `layers` long and a list of mixed blocks is
    stack = stacks[0] if stacks and (uniform is None or len(uniform) != layers) else uniform
    every, expert_blocks, not_linear = _linears(stack or (), experts)
    if uniform is None:
        return None, None, False, every, expert_blocks, not_linear
    block = uniform[0]
    linears = {name.rsplit(".", 1)[-1] for name, m in block.named_modules() if _gemm_features(m)}
    leaves = {name.rsplit(".", 1)[-1] for name, _ in block.named_modules()}
    qk_norm = {"q_norm", "k_norm"} <= leaves
    return uniform, tuple(sorted(linears)), qk_norm, every, expert_blocks, not_linear


def _linears(stack, experts: int) -> tuple[tuple, tuple[int, ...], tuple[str, ...]]:
    """(every GEMM module of the blocks as (name within its block, in, out, blocks having it), the indices of the
    blocks holding fused expert tensors, the names of those GEMM modules that are not nn.Linear)."""
    shapes: dict[tuple[str, int, int], int] = {}
    not_linear: set[str] = set()
    for b in stack:
        for name, m in b.named_modules():
            features = _gemm_features(m)
            if features:
                shapes[(name, *features)] = shapes.get((name, *features), 0) + 1
                if not _is_linear(m):
                    not_linear.add(name)
    blocks = tuple(i for i, b in enumerate(stack) if any(is_expert_tensor(p.shape, experts) for p in b.parameters()))
    return tuple(sorted((*key, count) for key, count in shapes.items())), blocks, tuple(sorted(not_linear))


def _gemm_features(module) -> tuple[int, int] | None:
    """(in, out) features of a module whose forward is one GEMM over its weight, as peft's all-linear finds them: an
    nn.Linear (or subclass), or transformers' Conv1D (GPT-2, OpenAI-GPT: weight stored [in, out], addmm); None for
    anything else."""
    if _is_linear(module):
        return int(module.in_features), int(module.out_features)
    if type(module).__name__ == "Conv1D" and type(module).__module__ == "transformers.pytorch_utils":
        return int(module.nx), int(module.nf)
    return None


def _is_linear(module) -> bool:
    """An nn.Linear or a subclass of it (Falcon's FalconLinear, Llama-4's router), told by its classes' names so that
    this module does not import torch itself (transformers' build already has)."""
    return any(c.__name__ == "Linear" and c.__module__ == "torch.nn.modules.linear" for c in type(module).__mro__)
