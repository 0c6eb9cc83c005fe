"""Mixture-of-experts memory (issue 26): what an MoE layer's experts, router and dispatch keep for backward, per token.

From transformers 5.24's integrations/moe.py `grouped_mm_experts_forward` (the default experts implementation; the
H200 runs 5.17) and the Mixtral router (models/mixtral/modeling_mixtral.py 96-111), per token and MoE layer, K = top-k
routed experts, F = the expert's intermediate size, e = bytes of the experts' activations:
- gate/up grouped GEMM output [K, 2F], one storage kept (as its two chunks) by the activation and the gating
  product: 2F e; the activation's output, kept by the product: F e;
- the down grouped GEMM's output [K, h], kept by the routing-weight multiply (the weights come from the router,
  which depends on the hidden state, so they need a gradient even with frozen experts): h e;
- trained experts only: the gathered tokens [K, h] and the gating product [K, F], the two grouped GEMMs' inputs,
  kept for the weight gradients (autograd keeps a matmul's input only for its weight's gradient; frozen experts under
  LoRA / QLoRA keep neither): h e + F e;
- the router and the dispatch: fp32 softmax probabilities (4 per expert), top-k values (4 K) and the int64 sort
  permutation, its gather index and inverse (3 x 8 K): ROUTING_BYTES.
e is 2 for the bf16 grouped GEMMs (bf16 weights, or train.py's per-forward bf16 cast of fp32 experts:
training/moe.py). Under QLoRA, train.py's per-expert NF4 layers (bitsandbytes Linear4bit) return their input's dtype,
and QLoRA's residual stream is fp32 (peft casts the embeddings), so e = 4 there; that loop sums the experts with
`index_add_`, whose backward keeps its source (the weighted down output, `expand_as(source)` in torch's
derivatives): h e more per routed copy. Counted on CPU: tests/test_estimate_moe_saved.py.
Liger's fused experts kernel never runs (train.py leaves it out on MoE, generator/catalog/liger.py): the experts'
terms are the same with and without --liger.
Backward: the gradients of one layer's expert intermediates [K tokens, 2F and F] are alive at once:
BACKWARD_TRANSIENT_F_BYTES x F x K per token, beside the dense layers' F-wide transient.
"""

from __future__ import annotations

from generator.model.types import ModelSpec
from generator.model.types import expert_matrices as layout_matrices

ROUTING_BYTES_PER_EXPERT = 4.0
"""fp32 router probabilities kept by the softmax (and the top-k that reads them), per expert per token."""
ROUTING_BYTES_PER_ROUTE = 4.0 + 3 * 8.0
"""Per routed copy: the fp32 top-k value, and the int64 sort permutation, gather index and inverse permutation."""


def is_moe(model: ModelSpec) -> bool:
    return model.num_experts > 0


DENSE_EXPERTS = ("llama4", "llama4_text")
"""Model types whose transformers implementation runs every expert over every token and weights each output by the
router's score instead of dispatching tokens (transformers 5 modeling_llama4.py Llama4TextMoe.forward: the hidden
states repeated num_experts times into one bmm per projection; tests/test_estimate_expert_flops.py counts it on CPU).
Their experts' GEMMs and intermediates have tokens x experts rows, not tokens x top-k: Llama-4 Scout's 16 experts at
top-1 cost 16 times their routed FLOPs."""


def expert_rows(model: ModelSpec) -> int:
    """Rows each token puts through one layer's experts (1 for a dense model): its top-k, or every expert where the
    implementation runs them densely (DENSE_EXPERTS)."""
    if not is_moe(model):
        return 1
    return model.num_experts if model.model_type in DENSE_EXPERTS else max(model.experts_per_token, 1)


SHARED_MLP_UP = ("up_proj", "w3", "gate_up_proj")
"""Leaf names of the Linear that sets a shared expert's width (its gate and up run side by side; a fused gate_up is
twice as wide)."""


def shared_mlp(model: ModelSpec) -> tuple[int, bool]:
    """(width, gated) of the dense SwiGLU MLP every token of an MoE layer also passes (Qwen2-MoE's shared_expert,
    DeepSeek's and GLM's shared_experts, Llama-4's shared_expert), read from the built model's Linears
    (ModelSpec.layer_linears) in the layers holding experts; gated: its output is scaled by a sigmoid of a 1-wide
    Linear (Qwen2-MoE's shared_expert_gate), which keeps that output and the gate for backward. (0, False) where
    there is none."""
    layers = expert_layer_count(model)
    width, gated = 0, False
    for name, _, out, count in model.layer_linears:
        if "shared" not in name or count != layers:
            continue
        leaf = name.rsplit(".", 1)[-1]
        if leaf in SHARED_MLP_UP:
            width += out // 2 if leaf == "gate_up_proj" else out
        gated = gated or out == 1
    return width, gated and width > 0


def expert_layer_count(model: ModelSpec) -> int:
    """Decoder layers holding routed experts (ModelSpec.expert_layers; every layer unless the model says fewer)."""
    return model.expert_layers or model.num_layers


def expert_matrices(model: ModelSpec) -> int:
    """Weight matrices per expert: gate, up and down; up and down without a gate (model.types.expert_matrices)."""
    return layout_matrices(model.experts_layout)


def gated_experts(model: ModelSpec) -> bool:
    """Each expert is gate and up -> SwiGLU -> down (transformers' default layout), not up -> activation -> down
    (Nemotron-H's squared ReLU)."""
    return expert_matrices(model) == 3


def expert_params(model: ModelSpec) -> int:
    """Parameters in all experts of all layers (expert_matrices per expert; no biases in the llama-family MoEs)."""
    return (
        expert_layer_count(model)
        * model.num_experts
        * expert_matrices(model)
        * model.hidden_size
        * model.intermediate_size
    )


def mlp_element_bytes(method: str, residual: int = 4) -> int:
    """Bytes per element of the MLP's (or experts') intermediates: 4 under QLoRA with an fp32 residual stream
    (`residual`, layer_saved.residual_bytes: peft's prepare_model_for_kbit_training casts the norms' weights to
    fp32), where bitsandbytes' Linear4bit returns its input's dtype, so gate, up and the activation between them are
    fp32 (a dense layer too: tests/test_estimate_lora_saved.py); else 2 (bf16 under autocast, or a bf16 model)."""
    return 4 if method == "qlora" and residual == 4 else 2


def moe_saved_bytes_per_token(model: ModelSpec, method: str, residual: int = 4, compiled: bool = False) -> float:
    """Bytes one MoE layer's experts, router and dispatch keep for backward, per token (module docstring).

    compiled: under torch.compile the activation output is not kept; AOTAutograd's min-cut partitioner recomputes it
    from the gate/up output in backward. Memory history of Mixtral-8x7B LoRA in float8 on the GPU: gate/up [K, 2F]
    and down [K, h] per routed copy in bf16 alive at the peak, nothing else F-wide (activations._layer_bytes); trained
    experts keep one F-wide tensor fewer too (counted on CPU with the same partitioner,
    tests/test_estimate_compiled_saved.py)."""
    h, f, k = model.hidden_size, model.intermediate_size, expert_rows(model)
    e = mlp_element_bytes(method, residual)
    # gated: gate/up output, activation output, down output; ungated: the activation's input (squared ReLU keeps its
    # ReLU output), down output
    kept = 2 * f + (0 if compiled else f) + h if gated_experts(model) else f + h
    if method == "full":
        kept += h + f  # the grouped GEMMs' inputs, for the experts' weight gradients
    if method == "qlora":
        kept += h  # the per-expert loop's index_add_ source (training/moe.py Nf4Experts)
    routing = ROUTING_BYTES_PER_EXPERT * model.num_experts + ROUTING_BYTES_PER_ROUTE * model.experts_per_token
    return float(k * kept * e + routing)


def backward_transient_routes(model: ModelSpec) -> int:
    """How many F-wide intermediates per token one layer's backward holds at once: K for an MoE, 1 for a dense MLP."""
    return expert_rows(model)
