"""What one llama-family decoder layer keeps for backward under SDPA, per token, from the tensors autograd saves
(transformers 5.x source); estimate.activations builds the step's activation terms from it.

Per token and decoder layer (h hidden, q = heads x head_dim, kv = kv_heads x head_dim, F intermediate, r = bytes of
the residual stream: 2 when the model is bf16, 4 when fp32 weights run under bf16 autocast):
- each RMSNorm (MistralRMSNorm.forward): the fp32 upcast kept by pow/mul (4h; for r = 4 the input itself), the
  normalised tensor in the input dtype kept by `weight *` (r h), and its bf16 output kept by the next linear (2h);
- attention: rotated q (2q), k and v (2kv each) and the output (2q) kept by SDPA (flash / mem-efficient: no s^2 term,
  GQA passed through `enable_gqa` when there is no mask), the contiguous transposed output kept by o_proj (2q). With a
  mask (dense SDPA, eager) transformers repeats k and v per query head first (sdpa_attention.py 42-51, 118-127), and
  the kernel keeps the repeated copies: 2q each instead of 2kv. SDPA's kernels write their output [b, s, heads, d]
  and return a transposed view, so transformers' `.transpose(1, 2).contiguous()` copies nothing and o_proj keeps the
  tensor SDPA keeps (one 2q, not two); eager's matmul output is a fresh [b, heads, s, d] that nothing keeps, and its
  copy is o_proj's (its scores: attention.mask_bytes);
- SwiGLU MLP: gate output (kept by silu), silu output and up output (kept by the product), the product (kept by
  down_proj): 8F. MoE: the routed experts, router and dispatch instead (generator/estimate/moe.py).
"""

from __future__ import annotations

from generator.catalog import strategies as catalog
from generator.estimate.moe import mlp_element_bytes, moe_saved_bytes_per_token, shared_mlp
from generator.estimate.own_layer import fused_qkv_bytes
from generator.estimate.states import qlora_kept_bytes
from generator.estimate.types import Workload
from generator.model.types import ModelSpec


def residual_bytes(workload: Workload, strategy: str) -> int:
    """Bytes per element of the residual stream: fp32 when fp32 weights run under autocast outside DeepSpeed, and
    under QLoRA whenever its unquantised embeddings are fp32 (states.qlora_kept_bytes: the stream starts fp32 and
    autocast keeps it)."""
    if workload.method == "qlora":
        return qlora_kept_bytes(workload)
    return 4 if workload.load_dtype == "fp32" and catalog.strategy(strategy).framework == "ddp" else 2


def layer_saved_bytes_per_token(
    model: ModelSpec,
    r: int,
    liger: bool = False,
    path: str = "sdpa_causal",
    method: str = "full",
    compiled: bool = False,
) -> float:
    """Bytes one decoder layer keeps for backward, per token (see module docstring).

    Liger's RMSNorm keeps only its input (+ per-row rstd) and its SwiGLU only gate and up outputs (silu recomputed).
    path: attention.kernel_path's answer (which k/v the kernel keeps, whether o_proj's input is SDPA's own output).
    method: what an MoE's experts keep depends on whether they train (moe.moe_saved_bytes_per_token); compiled: the
    layer runs under torch.compile (the experts recompute their activation, moe.moe_saved_bytes_per_token)."""
    h = model.hidden_size
    q = model.num_heads * model.head_dim
    kv = q if path in ("sdpa_dense", "eager") else model.num_kv_heads * model.head_dim
    f = model.intermediate_size
    norms = 2 * ((r * h if liger else 4 * h + r * h) + 2 * h) + head_norm_bytes(model, liger)
    # eager's AV product is not kept (only o_proj's contiguous copy of it); a kernel keeps its output
    attention = (2 if path == "eager" else 4) * q + 4 * kv + o_proj_input_bytes(model, path)
    attention += fused_qkv_bytes(model, path)
    # gate and up outputs (and, without Liger, the activation between them) in the MLP's element size, the product
    # kept by down_proj in bf16 (a frozen base's down keeps none: lora_saved_delta_per_token takes it back)
    mlp_f = (2 if liger else 3) * f * mlp_element_bytes(method, r) + 2 * f
    mlp = mlp_f if not model.num_experts else moe_saved_bytes_per_token(model, method, r, compiled)
    shared, gated = shared_mlp(model)
    if shared:  # a dense SwiGLU beside the experts keeps what a dense MLP does; a gated one its output and the gate
        mlp += 3 * shared * mlp_element_bytes(method, r) + 2 * shared + (2 * h + 2 if gated else 0)
    return float(norms + attention + mlp)


def head_norm_bytes(model: ModelSpec, liger: bool, frozen: bool = False) -> int:
    """Bytes per token q_norm and k_norm keep (ModelSpec.qk_norm), over q_proj's and k_proj's bf16 outputs, whose raw
    values nothing else keeps (RoPE's multiplies by cos and sin keep only those): the fp32 upcast (4) and, where the
    norm's weight trains, the normalised bf16 tensor `weight *` keeps (2); a fused norm (Liger's, or inductor's under
    a compiled layer) keeps its bf16 input instead (2). k_norm acts before k is repeated for the query heads."""
    if not model.qk_norm:
        return 0
    width = (model.num_heads + model.num_kv_heads) * model.head_dim
    return 2 * width if liger else (4 if frozen else 6) * width


def o_proj_input_bytes(model: ModelSpec, path: str) -> int:
    """Bytes per token o_proj's input adds beside the attention output the kernel keeps: none under SDPA (the same
    storage, see the module docstring); a bf16 copy under eager and flex (flex not checked against a count)."""
    return 0 if path.startswith("sdpa") else 2 * model.num_heads * model.head_dim
