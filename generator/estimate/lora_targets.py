"""Which of a model's Linears LoRA adapts, at what widths and in how many decoder layers: the llama names train.py
and peft match (q/k/v/o, gate/up/down), the model's own Linears where those names do not hold (ModelSpec.layer_linears:
Phi-3's qkv_proj, GPT-NeoX's dense_h_to_4h, a hybrid's attention layers, an MoE's shared expert and MLA projections),
and the adapter parameters they give. The memory states (states.py), the saved activations (lora_saved.py) and the
step's adapter GEMMs and passes read them here.
"""

from __future__ import annotations

from generator.catalog.peft_moe import MOVED_NAMES, mlp_names_reach_linears
from generator.estimate.scripts import ALL_LINEAR, lora_modules
from generator.model.types import ModelSpec

# Every projection LoRA can adapt in a decoder layer (train.py's default: all of them; Workload.lora_targets).
LORA_TARGETS = ALL_LINEAR


def adapted_targets(model: ModelSpec, targets: tuple[str, ...] = LORA_TARGETS) -> tuple[str, ...]:
    """The targets that exist as nn.Linear in this model: an MoE's experts are fused expert tensors, not Linear
    layers peft adapts by name, so only the attention projections remain; a model whose Linears are read
    (ModelSpec.linear_names) keeps the names it has (StarCoder2 has q/k/v/o_proj, not gate/up/down_proj)."""
    return tuple(t for t in named_targets(model, targets) if not (model.num_experts and t in ("gate", "up", "down")))


def named_targets(model: ModelSpec, targets: tuple[str, ...]) -> tuple[str, ...]:
    """The llama-named targets the model's decoder layers hold as Linears (all of them where the names are not read:
    the llama family), as peft matches names and train.py's default keeps those a model has
    (training/model.linear_targets)."""
    if model.linear_names is None:
        return targets
    if not model.num_experts:
        return tuple(t for t in targets if f"{t}_proj" in model.linear_names)
    # an MoE's MLP names are settled apart (adapted_targets, moe_mlp_linears_adapted); its attention names are those
    # its blocks hold, of every kind (a hybrid's first block may have none: Qwen3-Next's linear attention), as
    # target_layers counts them: DeepSeek's MLA has q_proj (or q_a/q_b_proj) and o_proj, no k_proj or v_proj
    leaves = linears_by_leaf(model)
    return tuple(t for t in targets if t in MOVED_NAMES or not leaves or f"{t}_proj" in leaves)


def linears_by_leaf(model: ModelSpec) -> dict[str, tuple[tuple[str, int, int, int], ...]]:
    """The decoder blocks' Linears (ModelSpec.layer_linears) by their last name, which is what peft matches a target
    against: where several blocks' kinds share a name (a hybrid's, an MLA's), each entry in layer_linears' order."""
    found: dict[str, list[tuple[str, int, int, int]]] = {}
    for linear in model.layer_linears:
        found.setdefault(linear[0].rsplit(".", 1)[-1], []).append(linear)
    return {leaf: tuple(linears) for leaf, linears in found.items()}


def linear_dims(model: ModelSpec) -> dict[str, tuple[int, int]]:
    """(in_features, out_features) of each decoder-layer projection LoRA can adapt, by short name."""
    h, q = model.hidden_size, model.num_heads * model.head_dim
    kv, f = model.num_kv_heads * model.head_dim, model.intermediate_size
    return {"q": (h, q), "k": (h, kv), "v": (h, kv), "o": (q, h), "gate": (h, f), "up": (h, f), "down": (f, h)}


def own_linears_adapted(model: ModelSpec, targets: tuple[str, ...] = LORA_TARGETS) -> bool:
    """Whether LoRA adapts the model's own Linears rather than the llama names: all linear layers asked for, on a
    dense architecture whose decoder lacks some of q/k/v/o/gate/up/down_proj (Phi-3's qkv_proj, GPT-NeoX's
    dense_h_to_4h, GPT-2's Conv1D), where peft's all-linear resolves every Linear of its blocks (the launch line tells
    train.py `--lora-targets all-linear` there: emit.command). An MoE keeps the names: all-linear would adapt its
    router."""
    if targets != ALL_LINEAR or model.linear_names is None or model.num_experts or not model.layer_linears:
        return False
    return any(m not in model.linear_names for m in lora_modules(ALL_LINEAR))


def adapted_modules(model: ModelSpec, targets: tuple[str, ...] = LORA_TARGETS) -> tuple[tuple[str, int, int, int], ...]:
    """(name, in_features, out_features, decoder layers having it) of each linear LoRA adapts: the model's own
    (ModelSpec.layer_linears) where own_linears_adapted, else the targets by their llama names (linear_dims)."""
    if own_linears_adapted(model, targets):
        return tuple((name, a, b, n) for name, a, b, n in model.layer_linears)
    dims = {**linear_dims(model), **(_own_attention_dims(model) if model.num_experts else {})}
    named = tuple((t, *dims[t], target_layers(model, t)) for t in adapted_targets(model, targets))
    return named + moe_mlp_linears_adapted(model, targets)


def _own_attention_dims(model: ModelSpec) -> dict[str, tuple[int, int]]:
    """An MoE's attention projections at the widths its built blocks give them (ModelSpec.layer_linears), where the
    llama widths do not hold: MLA's o_proj reads heads x v_head_dim, its q_proj heads x qk_head_dim."""
    own = linears_by_leaf(model)
    return {t: own[f"{t}_proj"][-1][1:3] for t in ("q", "k", "v", "o") if f"{t}_proj" in own}


def moe_mlp_linears_adapted(model: ModelSpec, targets: tuple[str, ...]) -> tuple[tuple[str, int, int, int], ...]:
    """An MoE's Linears that the llama MLP targets reach by name, at their own widths (ModelSpec.layer_linears):
    train.py's default adapts gate_proj, up_proj and down_proj on every Linear so named, never the fused routed
    experts, except where peft 0.21 moves those names onto the experts and it leaves them out (catalog.peft_moe): so the
    shared expert's (Qwen1.5-MoE's shared_expert: 3 of its 7 adapters a layer, 58% of their width, checked with peft
    0.21.2 and 0.22.0 by tests/test_estimate_lora_own_linears.py); none where the experts are fused tensors and no
    Linear has those names (Mixtral)."""
    if not model.num_experts or not mlp_names_reach_linears(model.model_type):
        return ()
    by_leaf = linears_by_leaf(model)
    return tuple(linear for t in targets if t in MOVED_NAMES for linear in by_leaf.get(f"{t}_proj", ()))


def target_layers(model: ModelSpec, target: str) -> float:
    """Decoder layers holding the llama-named projection `target` (q -> q_proj): those of the built model's blocks
    that have it (a hybrid's attention projections are in its attention layers only: Qwen3-Next's 12 of 48), else
    every layer (a closed-form family, or a model whose blocks do not name it)."""
    held = sum(n for *_, n in linears_by_leaf(model).get(f"{target}_proj", ()))
    return min(held, model.num_layers) if held else model.num_layers


def adapted_input_width(model: ModelSpec, targets: tuple[str, ...] = LORA_TARGETS) -> float:
    """Input features summed over one layer's adapted projections (what LoRA dropout runs over), mean over layers."""
    return sum(a * n for _, a, _, n in adapted_modules(model, targets)) / model.num_layers


def lora_params(model: ModelSpec, rank: int, targets: tuple[str, ...] = LORA_TARGETS) -> int:
    """Adapter parameters: r x (in + out) per adapted linear (MoE experts not adapted)."""
    return sum(rank * (a + b) * n for _, a, b, n in adapted_modules(model, targets))
