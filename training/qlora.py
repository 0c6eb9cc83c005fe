"""QLoRA's 4-bit base: one quantization config for every load, and a random init quantised one decoder layer at a time.

A pretrained QLoRA load is `from_pretrained(model, quantization_config=quantization_config())`: transformers swaps
the Linear layers for bitsandbytes Linear4bit and quantises each weight as it reads it. A random init has no file to
read. It used to build the whole random bf16 model on the GPU and hand its state dict to that same from_pretrained,
which peaked at the bf16 model plus its 4-bit copy, and transformers' caching_allocator_warmup then reserved the
model's load size once more: for Mixtral-8x7B 87 GB + 85 GB asked of a 139 GB H200 (issue 26, an out-of-memory
traceback). `quantised_random_model` instead runs from_pretrained's own steps by hand, without a file:

1. the model on the meta device (no memory), then transformers' bitsandbytes quantizer swaps its Linear layers for
   Linear4bit (`hf_quantizer.preprocess_model`, what from_pretrained does before reading weights, lm_head kept);
2. for each decoder layer in turn: random bf16 weights on the GPU drawn by the model's own `_init_weights` (seeded
   per layer, so a layer's weights do not depend on the device order of the others), each Linear's weight quantised
   to NF4 as `Bnb4bitQuantize` does it (`Params4bit(...).to(device)`), an MoE's fused experts to per-expert
   Linear4bit (training/moe.py: bitsandbytes takes only nn.Linear, and peft would cast bf16 experts to fp32); the
   bf16 tensors are dropped before the next layer;
3. embeddings, final norm, lm_head and the rotary buffers materialised and initialised the same way;
4. `hf_quantizer.postprocess_model` and the attributes from_pretrained leaves (`hf_quantizer`, `is_loaded_in_4bit`,
   `config.quantization_config`), which peft's prepare_model_for_kbit_training and accelerate read.

Peak memory: the 4-bit model plus one decoder layer in bf16 (Mixtral: ~2.8 GB for a layer's experts). No
caching_allocator_warmup runs (it is from_pretrained's). Needs bitsandbytes; in train.py a GPU.
"""

from __future__ import annotations

from generator.errors import UserError


def quantization_config():
    """NF4 with double quantisation, bf16 compute; bf16 storage so FSDP and ZeRO-3 can shard the packed weights."""
    import torch
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16,
        bnb_4bit_quant_storage=torch.bfloat16,
    )


def quantised_random_model(config, init_device: str, quantization_config, attn_implementation=None, **_ignored):
    """A random-init model with its Linear layers (and MoE experts) in NF4 on `init_device`, built one decoder layer
    at a time (module docstring). `_ignored`: dtype and device_map of a pretrained load, which this path fixes (bf16
    storage, everything on `init_device`)."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.quantizers import AutoHfQuantizer

    from training.moe import quantise_experts, routed_experts

    device = torch.device(init_device)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation=attn_implementation)
    hf_quantizer = AutoHfQuantizer.from_config(quantization_config, pre_quantized=False)
    hf_quantizer.preprocess_model(model, device_map={"": init_device}, dtype=torch.bfloat16)
    base_seed = torch.initial_seed()
    layers, experts = decoder_layer_list(model), routed_experts(config)
    for i, layer in enumerate(layers):
        torch.manual_seed(base_seed + 1 + i)
        materialise(model, layer, device)
        quantise_experts(layer, experts, quantization_config, device)
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the layer's bf16 blocks back to the driver before the next layer draws its own
    torch.manual_seed(base_seed)
    in_layers = {id(m) for layer in layers for m in layer.modules()}
    materialise(model, model, device, skip=in_layers)
    model.tie_weights()
    hf_quantizer.postprocess_model(model)
    model.hf_quantizer = hf_quantizer  # no hf_device_map: from_pretrained sets one only for a multi-device map
    model.eval()  # as from_pretrained leaves it; train.py switches to train mode before the loop
    return model


def decoder_layer_list(model) -> list:
    """The repeated decoder blocks: the longest ModuleList of one class (model.model.layers for llama-family)."""
    import torch

    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len({type(c) for c in m}) == 1]
    if not lists:
        raise UserError(f"--init random --method qlora: no decoder layers found in {type(model).__name__}")
    return list(max(lists, key=len))


def materialise(model, root, device, skip: frozenset | set = frozenset()) -> None:
    """Give every meta tensor under `root` (modules in `skip` apart) real storage on `device` and initialise it with
    the model's `_init_weights`; Linear4bit weights are drawn in bf16 through a plain Linear, then quantised."""
    import bitsandbytes as bnb
    import torch

    for module in root.modules():
        if id(module) in skip:
            continue
        if isinstance(module, bnb.nn.Linear4bit):
            if module.weight.device.type == "meta":
                _quantise_linear(model, module, device)
            continue
        own = [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]
        if not any(t is not None and t.device.type == "meta" for _, t in own):
            continue
        if "RotaryEmbedding" in type(module).__name__:
            _rebuild_buffers(module, device)
            continue
        module.to_empty(device=device, recurse=False)
        with torch.no_grad():
            model._init_weights(module)


def _rebuild_buffers(module, device) -> None:
    """A rotary embedding's inv_freq buffers computed again on `device` by its own constructor: they are not weights
    (non-persistent, never in a checkpoint). transformers 5.17 and 5.24's `_init_weights` recompute them too, but only
    for a rotary module with `original_inv_freq`; the constructor serves every one."""
    import torch

    with torch.device(device):
        fresh = type(module)(module.config)
    for name, buffer in fresh.named_buffers(recurse=False):
        module._buffers[name] = buffer


def _quantise_linear(model, module, device) -> None:
    """One Linear4bit's weight: drawn in bf16 exactly as `_init_weights` draws an nn.Linear's, then NF4 on `device`
    (transformers' Bnb4bitQuantize.convert: Params4bit with the meta parameter's settings, moved to the device)."""
    import bitsandbytes as bnb
    import torch

    with torch.no_grad():
        plain = torch.nn.Linear(
            module.in_features, module.out_features, bias=module.bias is not None, device=device, dtype=torch.bfloat16
        )
        model._init_weights(plain)
    old = module.weight
    module.weight = bnb.nn.Params4bit(plain.weight.data, requires_grad=False, **old.__dict__).to(device)
    if module.bias is not None:
        module.bias = torch.nn.Parameter(plain.bias.data, requires_grad=False)
    del plain
