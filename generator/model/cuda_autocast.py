"""CUDA autocast's cast policy, on tensors torch's own autocast does not touch: the meta device (sizing's count) and
the CPU (bench/scripts/saved_audit.py), so that what a layer keeps is counted as a GPU step under bf16 mixed
precision keeps it.

Why not torch.autocast: its CUDA kernels cast by the tensor's device (the AutocastCUDA dispatch key), which neither a
meta nor a CPU tensor carries, and a CPU-only build refuses a fake CUDA tensor's device guard; the CPU's own autocast
has other lists (it leaves layer_norm, softmax and pow in the input's dtype). The difference is what a LayerNorm
family keeps: on an H200, StarCoder2's fp32 full fine-tune kept about 13 KB a token and layer more than the bf16
count priced (bench/results/memhist-starcoder2-h200-2026-12-05.json): CUDA's autocast runs layer_norm in fp32, and
q, k and v each cast its fp32 output to a bf16 copy of their own (3 x 2h where the count had one 2h: 12,288 bytes at
h 3,072).

The lists are ATen's (aten/src/ATen/autocast_mode.h, AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32,
AT_FORALL_FP32_SET_OPT_DTYPE, AT_FORALL_PROMOTE, and autocast_mode.cpp's CUDA-only promote of cat, stack and
index_copy), the op eligibility rules torch's AMP documentation states: out-of-place ops only, floating tensors but
float64, an explicit `dtype=` respected, parameters' lower-precision casts cached for the forward. Applied where the
model calls torch (a TorchFunctionMode, above autograd as autocast is, so autograd keeps the cast tensors): a Python
function of torch.nn.functional runs as one op (F.normalize's inner norm is not cast on its own, as CUDA's
dispatcher would). A lower-precision op whose inputs are all fp32 and none requires grad is left alone: that is
transformers' rotary tables, computed inside `autocast(enabled=False)`, which the meta device cannot enter."""

from __future__ import annotations


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


LOWER = _names(
    "conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d conv_transpose3d convolution prelu addmm "
    "addmv addr matmul __matmul__ __rmatmul__ einsum mm mv linalg_vecdot linear addbmm baddbmm bmm chain_matmul "
    "linalg_multi_dot scaled_dot_product_attention _scaled_dot_product_flash_attention"
)
"""Ops CUDA autocast runs in the lower precision (bf16 here)."""
FP32 = _names(
    "acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow __pow__ __rpow__ softplus "
    "layer_norm group_norm frobenius_norm nuclear_norm cosine_similarity poisson_nll_loss cosine_embedding_loss "
    "nll_loss hinge_embedding_loss kl_div l1_loss smooth_l1_loss huber_loss mse_loss margin_ranking_loss "
    "multilabel_margin_loss soft_margin_loss triplet_margin_loss multi_margin_loss "
    "binary_cross_entropy_with_logits dist pdist cdist renorm logsumexp"
)
"""Ops it runs in fp32 (bf16 inputs cast up)."""
FP32_OUTPUT = _names("prod softmax log_softmax cumprod cumsum sum norm vector_norm matrix_norm")
"""Ops it runs with an fp32 output unless the call names a dtype (fp32_set_opt_dtype; norm's fp32_append_dtype)."""
PROMOTE = _names("addcdiv addcmul atan2 bilinear cross dot vdot grid_sampler index_put tensordot scatter_add")
PROMOTE_CUDA = _names("cat stack concat concatenate index_copy")
"""Ops it runs in the widest floating dtype among their inputs (PROMOTE; the rest CUDA's alone)."""


def cuda_autocast(dtype=None):
    """A context in which torch calls follow CUDA autocast's policy at `dtype` (bf16 by default)."""
    import torch
    from torch.overrides import TorchFunctionMode

    lower = dtype or torch.bfloat16

    def eligible(t) -> bool:
        return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64

    class CudaAutocast(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.cache: dict[int, tuple[object, object]] = {}  # id(parameter) -> (parameter, its cast)

        def is_weight_copy(self, t) -> bool:
            """Whether `t` is a parameter's cached cast (the estimate prices autocast's weight copies on its own)."""
            key = t.untyped_storage()._cdata
            return any(copy.untyped_storage()._cdata == key for _, copy in self.cache.values())

        def cast(self, value, to):
            if isinstance(value, (list, tuple)):
                return type(value)(self.cast(v, to) for v in value)
            if not eligible(value) or value.dtype == to:
                return value
            if to == lower and value.dtype == torch.float32 and value.is_leaf and value.requires_grad:
                hit = self.cache.get(id(value))  # autocast's cache: one copy of a weight for the forward
                if hit is None or hit[0] is not value:
                    hit = self.cache[id(value)] = (value, value.to(to))
                return hit[1]
            return value.to(to)

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            if "out" in kwargs:  # calls that supply out= are not eligible
                return func(*args, **kwargs)
            tensors = [t for t in (*args, *kwargs.values()) for t in (t if isinstance(t, (list, tuple)) else (t,))]
            floating = [t for t in tensors if eligible(t)]
            to = None
            if name in LOWER:
                if any(t.dtype != torch.float32 or t.requires_grad for t in floating):
                    to = lower
            elif name in FP32:
                to = torch.float32
            elif name in FP32_OUTPUT:
                if floating and eligible(args[0] if args else None) and kwargs.get("dtype") is None:
                    kwargs = {**kwargs, "dtype": torch.float32}
            elif (name in PROMOTE or name in PROMOTE_CUDA) and any(t.dtype == torch.float32 for t in floating):
                to = torch.float32
            if to is not None:
                args, kwargs = self.cast(args, to), {k: self.cast(v, to) for k, v in kwargs.items()}
            return func(*args, **kwargs)

    return CudaAutocast()
