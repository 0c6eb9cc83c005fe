"""Mixture-of-experts models in train.py (issue 26): experts that never run in fp32, and experts in NF4 under QLoRA.

transformers 5 stores an MoE layer's experts as 3-D parameters of one module (MixtralExperts: `gate_up_proj`
[experts, 2F, h], `down_proj` [experts, h, F]; transformers/models/mixtral/modeling_mixtral.py 56-94), not as
nn.Linear layers. Two consequences, checked against transformers 5.24's integrations/moe.py (the H200 runs 5.17):
- autocast casts what goes through F.linear; the experts go through `torch.nn.functional.grouped_mm`, which is not
  autocast-enabled, so `_grouped_mm` casts the *input to the weight's dtype* (moe.py 373-383: `input.to(weight.dtype)`).
  With fp32 weights (a full fine-tune's default load) every expert GEMM runs in fp32: eagerly through grouped_mm in
  fp32, and inside a compiled layer `_can_use_grouped_mm` refuses non-bf16 weights (moe.py 322-329) and
  transformers' per-expert `grouped_mm_fallback` loop runs in fp32 (the graph break dynamo reported in issue 26;
  Mixtral cut to 4 layers measured 5,502 tokens/s against 59,198 predicted). `cast_experts_for_compute` makes the
  experts do what autocast does for a Linear: each forward casts the fp32 weights to the autocast dtype (a
  differentiable copy, so the fp32 masters and AdamW states are kept and get the gradients);
- bitsandbytes' quantizer replaces only nn.Linear (transformers integrations/bitsandbytes.py, replace_with_bnb_linear),
  so a QLoRA load leaves the experts in bf16 and peft's prepare_model_for_kbit_training then casts every non-4-bit
  parameter to fp32 (peft utils/other.py 204-209): Mixtral's 45B expert parameters at 4 bytes, 180 GB.
  `quantise_experts` splits the fused experts into per-expert Linear4bit layers (NF4 like the rest of the base).
"""

from __future__ import annotations

import inspect

import torch  # this module is imported only once a model is being built (training/model.py, training/qlora.py)

from generator.errors import UserError
from generator.model.config_dims import EXPERTS_LAYOUT, expert_count, is_expert_tensor, odd_layout


def routed_experts(config) -> int:
    """The routed expert count of a transformers config (model.config_dims.expert_count of its text config, where a
    multimodal checkpoint keeps it); 0 for a dense model."""
    return expert_count(config.get_text_config(decoder=True))


def expert_modules(model) -> list:
    """Modules holding fused expert weights: a floating-point [experts, out, in] parameter of their own, `experts`
    the config's routed count (model.config_dims.is_expert_tensor: other 3-D weights, RecurrentGemma's gates, are
    not)."""
    experts = routed_experts(model.config)
    return [
        m
        for m in model.modules()
        if any(p.is_floating_point() and is_expert_tensor(p.shape, experts) for p in m.parameters(recurse=False))
    ]


def cast_experts_for_compute(model) -> int:
    """Give each experts module autocast's treatment (module docstring): under autocast its fp32 weights are cast
    to the autocast dtype for the forward; otherwise (no autocast, or weights already bf16 as under FSDP2's mixed
    precision, DeepSpeed or a bf16 load) the forward is unchanged. The number of modules whose weights are fp32 now.

    How: the module's forward is wrapped to call `torch.func.functional_call` with the cast weights, which swaps them
    in for that one call; inside it the weights are bf16, so the wrapper passes straight through to the original
    forward (no recursion, no state)."""
    fp32 = 0
    for module in expert_modules(model):
        original = module.forward
        module.forward = _casting_forward(module, original)
        fp32 += any(p.dtype == torch.float32 for p in module.parameters(recurse=False))
    return fp32


def _casting_forward(module, original):

    def forward(*args, **kwargs):
        # peft 0.21 adapts OLMoE's and Qwen3-MoE's experts itself (ParamWrapper): torch's parametrize then holds the
        # weights, the module has none of its own, and peft's wrapper computes them in the adapter's dtype
        weight = next(module.parameters(recurse=False), None)
        if weight is None:
            return original(*args, **kwargs)
        device = weight.device.type
        if not torch.is_autocast_enabled(device):
            return original(*args, **kwargs)
        dtype = torch.get_autocast_dtype(device)
        casts = {
            name: p.to(dtype)
            for name, p in module.named_parameters(recurse=False)
            if p.is_floating_point() and p.dtype != dtype
        }
        if not casts:
            return original(*args, **kwargs)
        return torch.func.functional_call(module, casts, args, kwargs)

    return forward


def experts_note(model_type: str) -> str:
    """train.py's one line when a run's experts hold fp32 weights."""
    return (
        f"train.py: note: {model_type}'s experts are 3-D parameters, not nn.Linear, so autocast does not cast them; "
        "train.py casts their fp32 weights to bf16 in each forward, as autocast does for the Linear layers (fp32 "
        "masters and AdamW states kept; without the cast every expert GEMM would run in fp32)"
    )


# -- QLoRA: per-expert NF4 ------------------------------------------------------------------------------------------


def quantise_experts(root, experts: int, quantization_config, device) -> int:
    """Replace each fused experts module under `root` by Nf4Experts (its weights quantised per expert on `device`,
    the bf16 tensors dropped; `experts` the config's routed count); the number replaced. Refuses layouts other than
    transformers' default (concatenated gate/up, [out, in] storage, no bias, gated, no post-expert norm) in one
    line."""
    found = 0
    for name, module in list(root.named_modules()):
        if module is root or not any(is_expert_tensor(p.shape, experts) for p in module.parameters(recurse=False)):
            continue
        _check_layout(module)
        parent, _, attr = name.rpartition(".")
        holder = root.get_submodule(parent) if parent else root
        setattr(holder, attr, Nf4Experts.from_fused(module, quantization_config, device))
        found += 1
    return found


def _check_layout(module) -> None:
    odd = [f"{flag}={not EXPERTS_LAYOUT[flag]}" for flag in odd_layout(module)]
    if len(inspect.signature(module.forward).parameters) < 3:  # Nf4Experts is called as transformers' routed experts
        raise UserError(
            f"--method qlora: {type(module).__name__} runs every expert over every token (its forward takes the "
            "hidden states alone), not the routed dispatch train.py quantises per expert; use --method lora"
        )
    if odd or not hasattr(module, "gate_up_proj") or not hasattr(module, "down_proj"):
        raise UserError(
            f"--method qlora: {type(module).__name__}'s experts layout "
            f"({', '.join(odd) or 'no gate_up_proj/down_proj'}) is not one train.py quantises per expert; "
            "use --method lora"
        )


def _nf4_linear(weight, quantization_config, device):
    """A Linear4bit holding `weight` [out, in] in NF4 with the QLoRA config's settings, quantised on `device`."""
    import bitsandbytes as bnb

    out_features, in_features = weight.shape
    layer = bnb.nn.Linear4bit(
        in_features,
        out_features,
        bias=False,
        compute_dtype=quantization_config.bnb_4bit_compute_dtype,
        compress_statistics=quantization_config.bnb_4bit_use_double_quant,
        quant_type=quantization_config.bnb_4bit_quant_type,
        quant_storage=quantization_config.bnb_4bit_quant_storage,
        device="meta",
    )
    layer.weight = bnb.nn.Params4bit(
        weight.detach().to(device, weight.dtype).contiguous(),
        requires_grad=False,
        quant_type=quantization_config.bnb_4bit_quant_type,
        compress_statistics=quantization_config.bnb_4bit_use_double_quant,
        quant_storage=quantization_config.bnb_4bit_quant_storage,
        module=layer,
    ).to(device)
    layer.requires_grad_(False)
    return layer


class Nf4Experts(torch.nn.Module):
    """The experts of one MoE layer as per-expert NF4 Linear layers, computing what transformers' eager experts
    forward computes (modeling_mixtral.py 69-94: each routed token through its experts' gate/up and down
    projections, weighted by the router and summed). Submodule names avoid `gate_proj`/`up_proj`/`down_proj`, so
    train.py's default LoRA targets stay on attention, as they do on the fused bf16 experts (no module of those names
    there either); `--lora-targets all-linear` adapts them too."""

    def __init__(self, gate_up, down, act_fn):
        super().__init__()
        self.num_experts = len(gate_up)
        self.gate_up = torch.nn.ModuleList(gate_up)
        self.down = torch.nn.ModuleList(down)
        self.act_fn = act_fn

    @classmethod
    def from_fused(cls, fused, quantization_config, device):
        gate_up, down = [], []
        for e in range(fused.gate_up_proj.shape[0]):  # one expert's bf16 weights at a time
            gate_up.append(_nf4_linear(fused.gate_up_proj[e], quantization_config, device))
            down.append(_nf4_linear(fused.down_proj[e], quantization_config, device))
        return cls(gate_up, down, fused.act_fn)

    def forward(self, hidden_states, top_k_index, top_k_weights):
        final = torch.zeros_like(hidden_states)
        top_k = top_k_index.shape[-1]
        with torch.no_grad():
            # One host read a layer: the routed (token, slot) pairs sorted by expert, and each expert's count.
            # transformers' loop (and this one until 2026-12-03) found each expert's tokens with torch.where, a host
            # synchronisation per expert: profiled on one H200, Mixtral-8x7B QLoRA at 4,096 x 1 had its GPU busy
            # 1,064 ms of a 1.45 s step behind 576 nonzero calls a step
            # (bench/results/profile-mixtral-qlora-h200-2026-12-03/).
            flat = top_k_index.reshape(-1)
            order = flat.argsort(stable=True)
            counts = torch.bincount(flat, minlength=self.num_experts).tolist()
            tokens, slots = order // top_k, order % top_k
        start = 0
        for e, n in enumerate(counts):
            if n:
                token_idx, top_k_pos = tokens[start : start + n], slots[start : start + n]
                gate, up = self.gate_up[e](hidden_states[token_idx]).chunk(2, dim=-1)
                out = self.down[e](self.act_fn(gate) * up) * top_k_weights[token_idx, top_k_pos, None]
                final.index_add_(0, token_idx, out.to(final.dtype))
            start += n
        return final
