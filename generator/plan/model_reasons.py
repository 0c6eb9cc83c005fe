"""The plan's lines about how this model will really run that its numbers alone do not show: where an MoE's experts'
implementation, not the routed FLOPs, sets the cost (experts run densely), where the host can set the pace (train.py's
4-bit experts at short micro-steps), a hybrid's recurrent layers priced as attention, a layer that keeps other than
the llama layer for backward (counted at sizing), and a config file named without its checkpoint."""

from __future__ import annotations

from dataclasses import replace

from generator.estimate.activations import activation_terms
from generator.estimate.attention import takes_math_kernel
from generator.estimate.moe import DENSE_EXPERTS
from generator.estimate.types import Workload
from generator.model.config_dims import EXPERTS_LAYOUT
from generator.model.presets import CHECKPOINT_PLACEHOLDER, checkpoint_name
from generator.model.types import ModelSpec
from generator.plan.types import PlanRequest


def model_problem(model: ModelSpec, request: PlanRequest) -> str | None:
    """What keeps this model from running the request at all, as one line (None: nothing)."""
    return positions_problem(model, request) or qlora_problem(model, request)


def positions_problem(model: ModelSpec, request: PlanRequest) -> str | None:
    """A sequence longer than the model's positions, where it cannot run: a position table (ModelSpec.position_table)
    is indexed past at the first step (an IndexError on the CPU, a device-side assert on a GPU), and train.py refuses
    any such length at load (training/model.py). Rotary and ALiBi models under other scripts only extrapolate: the
    plan warns (planner.plan_warnings)."""
    limit = model.max_seq_len
    if not limit or request.seq_len <= limit or not (model.position_table or request.script == "train.py"):
        return None
    why = (
        f"{model.model_type} looks its positions up in a table of {model.max_seq_len} rows, so a longer sequence "
        "fails at the first step"
        if model.position_table
        else f"train.py refuses a sequence above the model's max_position_embeddings ({model.max_seq_len})"
    )
    return f"--seq-len {request.seq_len}: {why}; use --seq-len {model.max_seq_len} or less"


def qlora_problem(model: ModelSpec, request: PlanRequest) -> str | None:
    """train.py quantises an MoE's experts per expert for QLoRA, from transformers' default layout, and calls them as
    routed experts; it refuses at load (training/moe.py _check_layout) dense experts (DENSE_EXPERTS: called with the
    hidden states alone) and any other layout (ModelSpec.experts_layout): say so before any config is written."""
    if request.method != "qlora" or request.script != "train.py" or not model.num_experts:
        return None
    if model.model_type in DENSE_EXPERTS:
        return (
            f"--method qlora with train.py: {model.model_type}'s experts run densely over every token, not the routed "
            "dispatch train.py quantises per expert; use --method lora"
        )
    if model.experts_layout:
        flags = ", ".join(f"{f}={not EXPERTS_LAYOUT[f]}" for f in model.experts_layout)
        return (
            f"--method qlora with train.py: {model.model_type}'s experts layout ({flags}) is not one train.py "
            "quantises per expert; use --method lora"
        )
    return None


def dense_experts_reason(model: ModelSpec) -> list[str]:
    """One line where transformers runs every expert over every token (estimate.moe.DENSE_EXPERTS): the step is
    priced that way, far above what the routed top-k suggests."""
    if not model.num_experts or model.model_type not in DENSE_EXPERTS:
        return []
    e, k = model.num_experts, max(model.experts_per_token, 1)
    return [
        f"experts run densely: transformers' {model.model_type} runs all {e} experts over every token and weights "
        f"their outputs by the router (top-{k} is a weighting, not a dispatch), so the experts cost {e // k}x their "
        "routed FLOPs; priced as it runs"
    ]


NF4_EXPERTS_LAUNCH_BOUND = (4096, 2944, 3491, 32768)
"""Mixtral-8x7B QLoRA under train.py on one H200 with the sorted NF4 expert dispatch
(bench/results/h200-x1-families-mixtral-sorted-2026-12-04.json): at 4,096 tokens a micro-step it ran 2,944 tokens/s
against 3,491 predicted, launch-bound (profile-mixtral-qlora-sorted-h200-2026-12-04: the GPU busy 1.06 s of each
1.39 s step, idle in thousands of gaps under 100 us); at 32,768 within 3% (-2.7% since clip_grad_norm_ is priced and
the QLoRA constants refitted with it, 2026-12-05; -1.9% before). (tokens measured slow, measured,
predicted, tokens measured GPU-bound)."""


def nf4_experts_reason(model: ModelSpec, workload: Workload) -> list[str]:
    """One line where train.py's 4-bit experts run micro-steps short enough that the host, which reads the routed
    counts once a layer and so cannot run ahead, may set the pace: the estimator's host rows do not cover that
    layer, so the prediction is optimistic there."""
    tokens = workload.seq_len * workload.micro_batch
    slow, measured, predicted, fine = NF4_EXPERTS_LAUNCH_BOUND
    if not (model.num_experts and workload.method == "qlora" and workload.script == "train.py" and tokens < fine):
        return []
    return [
        f"launch-bound risk: train.py's 4-bit experts read the routed counts once a layer, so the CPU cannot run "
        f"ahead of the GPU; at {slow:,} tokens a micro-step one H200 ran {measured:,} tokens/s where "
        f"{predicted:,} was predicted ({100 * (measured / predicted - 1):+.0f}%), at {fine:,} within 2%: at "
        f"{tokens:,} expect up to that shortfall, or raise the micro-batch"
    ]


def model_caveats(model: ModelSpec, workload: Workload) -> list[str]:
    """Every line of this module that applies to `model` under `workload`, in the plan's order."""
    return [
        *nf4_experts_reason(model, workload),
        *dense_experts_reason(model),
        *recurrent_reason(model),
        *own_layer_reason(model, workload),
        *config_only_reason(model),
    ]


OWN_LAYER_NOTE = 0.05
"""How far the counted layer must be from the llama formula's before the plan says so."""


def own_layer_reason(model: ModelSpec, workload: Workload) -> list[str]:
    """One line where the model's own decoder layer, counted at sizing (ModelSpec.layer_saved), keeps for backward
    more or less than the llama layer the formula holds, by OWN_LAYER_NOTE or more; and one where its class builds
    the attention mask always, so SDPA runs its masked kernel (Falcon)."""
    counted = model.layer_saved
    if counted is None:
        return []
    lines = []
    if counted.path == "sdpa_dense" and workload.attention == "sdpa":
        lines.append(
            f"attention: {model.model_type} builds its causal mask on every call (no is_causal shortcut), so SDPA "
            "runs its masked kernel over every score and keeps the mask's bias; priced so"
        )
    if takes_math_kernel(model, workload):
        # Falcon's class has no flex path; transformers 5.25's Falcon repeats the key heads and takes a fused kernel
        avoid = "--attention flex avoids it" if "flex" in model.attentions else "a newer transformers may avoid it"
        lines.append(
            f"attention: this transformers' {model.model_type} hands SDPA {model.num_kv_heads} key head(s) for "
            f"{model.num_heads} query heads without enable_gqa, so no fused kernel takes it and torch runs its math "
            f"kernel, which keeps every score in fp32 ({counted.score_bytes:g} bytes a score and head, counted at "
            f"sizing): memory priced so, and its speed from the table's rows of that kernel (a speed line says where "
            f"they do not apply); {avoid}"
        )
    key = ("backward_end", "layer_recompute") if workload.grad_checkpointing else ("forward_end", "activations")
    own, llama = (
        activation_terms(m, workload, "ddp")[key[0]][key[1]] for m in (model, replace(model, layer_saved=None))
    )
    if llama and abs(own / llama - 1) >= OWN_LAYER_NOTE:
        lines.append(
            f"activations: what a {model.model_type} decoder layer keeps for backward was counted from its own code at "
            f"sizing (the meta device): {own / llama:.2f}x what the llama layer's formula gives for its widths "
            f"({own / 1e9:.1f} GB against {llama / 1e9:.1f}); the plan uses the count"
        )
    return lines


def config_only_reason(model: ModelSpec) -> list[str]:
    """One line where --model was a config file alone: the plan is sized from it, but the launch line needs the
    checkpoint itself, so it names a placeholder."""
    if checkpoint_name(model.name) is not None:
        return []
    return [
        f"launch line: --model {model.name} is a config file only (no weights or tokenizer), so the command names "
        f"{CHECKPOINT_PLACEHOLDER}; put the checkpoint's directory or hub id there"
    ]


def recurrent_reason(model: ModelSpec) -> list[str]:
    """One line for a hybrid model: layers without softmax attention (ModelSpec.recurrent_layers) are priced as if
    they were attention layers, which they are not; its memory too, unless its own blocks were counted
    (ModelSpec.layer_saved: each kind of block, weighed by its share of the layers). Layers that run a recurrent
    mixer beside their attention (ModelSpec.mixer_layers) have its projections priced and its scan not."""
    lines = []
    if model.mixer_layers:
        lines.append(
            f"hybrid layers: {model.mixer_layers} of {model.num_layers} decoder layers run a recurrent mixer (Mamba) "
            "beside their attention (the config's layer_types: hybrid); its projections are priced as GEMMs, its scan "
            "and convolution are not, so the speed for this model is rough"
        )
    if not model.recurrent_layers:
        return lines
    head = (
        f"hybrid layers: {model.recurrent_layers} of {model.num_layers} decoder layers have no softmax attention "
        "(Mamba, linear attention, convolution, or an MLP alone: the config's layer_types); "
    )
    if model.layer_saved is not None:
        return [*lines, head + "their memory is counted from the model's own blocks, but the time prices softmax "
                "attention in every layer and no recurrent scan, so its speed for this model is rough"]  # fmt: skip
    return [*lines, head + "the estimate prices softmax attention in every layer and no recurrent scan, so its time "
            "and memory for this model are rough"]  # fmt: skip
