"""A training step as the operators it runs, from the model's config: every GEMM with its shape and dtype, the MoE
experts as grouped GEMMs, and the FLOPs each pass executes. Pure; timing.py prices them with a ComputeTable.

Per decoder layer: q (h -> heads*d), k and v (h -> kv_heads*d), o (heads*d -> h); dense MLP gate and up
(h -> i) and down (i -> h), or for a mixture of experts the router (h -> E) and the routed experts as two grouped
GEMMs over tokens x top_k rows (gate/up fused 2i wide, down; transformers 5's fused expert parameters); then lm_head
over the real vocabulary (a tied lm_head still multiplies). The attention and QKV biases (Qwen2) are GEMM epilogues
(cuBLAS adds them in the same kernel) and take no time of their own here. LoRA adds rank-r GEMMs beside each adapted
Linear: A (in -> r) and B (r -> out). A model sized on the meta device (ModelSpec.layer_linears) lists its decoder's
Linears as transformers built them instead: shared experts, the dense MLPs of the layers without experts, MLA's
low-rank projections and fused projections each at their own shape; the router (not an nn.Linear in transformers 5)
and the experts count in the layers that have them (ModelSpec.expert_layers).

Each Linear runs forward x @ W^T (m=tokens, k=in, n=out), the input gradient dY @ W (tokens, out, in) and, only when
its weight trains, the weight gradient dY^T @ X (out, tokens, in). Float8 (torchao, train.py's filter in
training/precision.py): every decoder Linear whose dims divide by 16 runs its GEMMs in float8, not lm_head, not the
LoRA adapters, not the router when its width does not divide by 16, and not the MoE experts (they are parameters
of one module, not nn.Linear, so torchao never converts them), nor GPT-2's Conv1D (ModelSpec.not_linear).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from generator.catalog.gpus import fp8_aligned
from generator.estimate.lora_targets import adapted_modules
from generator.estimate.moe import expert_layer_count, expert_matrices, expert_rows
from generator.estimate.types import Workload
from generator.model.types import ModelSpec


@dataclass(frozen=True)
class Linear:
    name: str
    """q, k, v, o, gate, up, down, router, lm_head, or lora_A / lora_B of one of them (a meta-sized model's own
    names, e.g. mlp.shared_expert.up_proj)."""
    k_in: int
    """in_features."""
    n_out: int
    """out_features."""
    count: int
    """Instances in the model (layers x per layer)."""
    trained: bool
    """Its weight gets a gradient (full fine-tuning; the LoRA adapters)."""
    fp8: bool
    """Runs in float8 under --precision fp8."""


@dataclass(frozen=True)
class Experts:
    name: str
    """gate_up or down."""
    k_in: int
    n_out: int
    num_experts: int
    top_k: int
    """Rows per token: each token passes through top_k experts (every expert where they run densely,
    estimate.moe.expert_rows)."""
    count: int
    """Layers."""
    trained: bool


def linears(model: ModelSpec, workload: Workload) -> list[Linear]:
    """Every dense GEMM-bearing Linear of the model, LoRA's adapters included."""
    h, q, kv = model.hidden_size, model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    i, layers, full = model.intermediate_size, model.num_layers, workload.method == "full"
    dims = {"q": (h, q), "k": (h, kv), "v": (h, kv), "o": (q, h)}
    if not model.num_experts:
        dims.update({"gate": (h, i), "up": (h, i), "down": (i, h)})
    if model.layer_linears:
        out = [
            Linear(n, a, b, c, full, fp8_aligned(a, b) and n not in model.not_linear)
            for n, a, b, c in model.layer_linears
        ]
    else:
        out = [Linear(n, a, b, layers, full, fp8_aligned(a, b)) for n, (a, b) in dims.items()]
    e = model.num_experts
    if e and not any(lin.n_out == e and lin.k_in == h and "attn" not in lin.name for lin in out):
        # the router is a Linear of its own only in some builds (Llama-4's Llama4Router); add it where none reads h
        out.append(Linear("router", h, e, expert_layer_count(model), full, fp8_aligned(h, e)))
    out.append(Linear("lm_head", h, _lm_head_width(model, out), 1, full, False))
    if workload.method != "full":
        r = workload.lora_r
        for t, a, b, n in adapted_modules(model, workload.lora_targets):
            out += [Linear(f"lora_A.{t}", a, r, n, True, False), Linear(f"lora_B.{t}", r, b, n, True, False)]
    return out


def _lm_head_width(model: ModelSpec, decoder: list[Linear]) -> int:
    """lm_head's out features on this GPU: the vocabulary, or a tensor-parallel rank's column shard of it
    (estimate.parallel.tp_shard_model divides matmul_params_active by tp and keeps vocab_size whole), read from what
    matmul_params_active leaves beside the decoder's GEMMs."""
    layer = sum(lin.k_in * lin.n_out * lin.count for lin in decoder)
    if model.num_experts:
        routed = expert_matrices(model) * model.hidden_size * model.intermediate_size * max(model.experts_per_token, 1)
        layer += routed * expert_layer_count(model)
    rest = (model.matmul_params_active - layer) // model.hidden_size
    return max(1, min(model.vocab_size, rest))


def experts(model: ModelSpec, workload: Workload) -> list[Experts]:
    """The routed experts' two grouped GEMMs per layer (none for a dense model)."""
    if not model.num_experts:
        return []
    h, i, e, k = model.hidden_size, model.intermediate_size, model.num_experts, expert_rows(model)
    full, n = workload.method == "full", expert_layer_count(model)
    up = (expert_matrices(model) - 1) * i  # gate and up side by side, or up alone
    return [Experts("gate_up", h, up, e, k, n, full), Experts("down", i, h, e, k, n, full)]


@dataclass(frozen=True)
class Gemm:
    """One GEMM call shape: 2*m*k*n FLOPs."""

    m: int
    k: int
    n: int
    op: str
    """fwd | dgrad | wgrad (compute_table rows are keyed the same way)."""
    dtype: str
    """bf16 | fp8."""
    calls: int
    """How many times per pass (instances in the model)."""
    passes: str
    """forward | backward: which pass runs it (forward reruns under activation checkpointing)."""

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.k * self.n * self.calls


def linear_shapes(tokens: int, k_in: int, n_out: int, trained: bool = True) -> list[tuple[int, int, int, str]]:
    """(m, k, n, op) of one Linear's GEMMs over `tokens` rows: forward x @ W^T, the input gradient dY @ W and, when
    its weight trains, the weight gradient dY^T @ X (what `probe --compute` times in each layout)."""
    shapes = [(tokens, k_in, n_out, "fwd"), (tokens, n_out, k_in, "dgrad")]
    return shapes + ([(n_out, tokens, k_in, "wgrad")] if trained else [])


def is_decoder_base(name: str) -> bool:
    """A decoder layer's own projection (q, k, v, o, the MLP, the router), not lm_head and not a LoRA adapter: what
    a whole-layer row of the compute table already holds."""
    return name != "lm_head" and not is_adapter(name)


def is_adapter(name: str) -> bool:
    """A LoRA adapter's rank-r GEMM (peft's lora_A / lora_B)."""
    return name.startswith("lora_")


def gemms(model: ModelSpec, workload: Workload, keep=None) -> list[Gemm]:
    """Every dense GEMM of one micro-step (tokens = micro-batch x sequence), forward and backward; `keep(name)`
    selects the Linears."""
    return [g for name, g in _named_gemms(model, workload) if keep is None or keep(name)]


@lru_cache(maxsize=1024)
def _named_gemms(model: ModelSpec, workload: Workload) -> tuple[tuple[str, Gemm], ...]:
    """(Linear name, GEMM) pairs; cached: a plan prices the same model and workload under every strategy, and the
    MFU and the operator time each list them again (pure, of frozen inputs)."""
    tokens = workload.seq_len * workload.micro_batch
    fp8 = workload.precision == "fp8"
    out: list[tuple[str, Gemm]] = []
    for lin in linears(model, workload):
        dtype = "fp8" if fp8 and lin.fp8 else "bf16"
        for m, k, n, op in linear_shapes(tokens, lin.k_in, lin.n_out, lin.trained):
            out.append((lin.name, Gemm(m, k, n, op, dtype, lin.count, "forward" if op == "fwd" else "backward")))
    return tuple(out)


def gemm_flops(model: ModelSpec, workload: Workload) -> tuple[float, float]:
    """(forward, backward) FLOPs per micro-step of the dense GEMMs and the experts' grouped GEMMs, executed once each
    (the recompute of activation checkpointing not counted)."""
    fwd = sum(g.flops for g in gemms(model, workload) if g.passes == "forward")
    bwd = sum(g.flops for g in gemms(model, workload) if g.passes == "backward")
    tokens = workload.seq_len * workload.micro_batch
    for ex in experts(model, workload):
        one = 2.0 * tokens * ex.top_k * ex.k_in * ex.n_out * ex.count
        fwd += one
        bwd += one * (2 if ex.trained else 1)
    return fwd, bwd


def executed_flops_per_token(model: ModelSpec, workload: Workload, attention_flops: float) -> float:
    """Model FLOPs per trained token on what the step executes once (MFU's numerator): the forward GEMMs, the
    input-gradient GEMMs, the weight-gradient GEMMs of trained weights only (a frozen base has none; LoRA's rank-r
    GEMMs count), and `attention_flops` (forward + backward score work per token). Recompute is not counted;
    float8 GEMMs count as the bf16 FLOPs they replace (bf16-equivalent)."""
    fwd, bwd = gemm_flops(model, workload)
    return (fwd + bwd) / (workload.seq_len * workload.micro_batch) + attention_flops


def fp8_cast_elements(model: ModelSpec, workload: Workload) -> dict[str, float]:
    """Elements per micro-step the float8 Linears cast (torchao tensorwise), by kind, one forward pass apart:
    'input' (the activation, each forward), 'grad' (the output gradient, backward), 'input_t' (the saved input
    recast transposed for the weight gradient: trained weights only), 'weight' (amax + cast + transposed copy of
    each float8 weight, each forward). Zero without fp8."""
    if workload.precision != "fp8":
        return {"input": 0.0, "grad": 0.0, "input_t": 0.0, "weight": 0.0}
    tokens = workload.seq_len * workload.micro_batch
    conv = [lin for lin in linears(model, workload) if lin.fp8]
    return {
        "input": float(sum(tokens * lin.k_in * lin.count for lin in conv)),
        "grad": float(sum(tokens * lin.n_out * lin.count for lin in conv)),
        "input_t": float(sum(tokens * lin.k_in * lin.count for lin in conv if lin.trained)),
        "weight": float(sum(lin.k_in * lin.n_out * lin.count for lin in conv)),
    }
