"""--precision fp8: float8 training of the decoder's Linear layers through torchao, and the per-layer compile it needs.

Order in train.py: the checks run before the Accelerator exists (a wrong machine fails in a second, not after loading
7B); the Accelerator gets `mixed_precision="fp8"` and an AORecipeKwargs with this module's filter and config, so the
conversion happens once, inside `accelerator.prepare`, before FSDP2 shards the model; train.py compiles the decoder
layers in place before prepare. docs/train.md, "Float8 training", says why accelerate's torchao path was kept.
"""

from __future__ import annotations

import os

from generator.catalog.gpus import fp8_aligned
from generator.errors import UserError

FP8_MIN_CAPABILITY = (8, 9)  # Ada (8.9) and Hopper (9.0) are the first with float8 tensor cores; Blackwell has them too
FP8_RECIPES = ("tensorwise", "rowwise")
# The output projection stays bf16: its activations feed the loss's softmax directly, where float8's 3 mantissa bits
# cost the most, and torchtitan and torchao's own filters leave it out for the same reason.
FP8_SKIPPED_NAMES = ("lm_head",)
LORA_ADAPTER_PREFIX = "lora_"  # peft's lora_A / lora_B (and lora_embedding_*) module names


def config_asks_fp8() -> bool:
    """The launch config's `mixed_precision: fp8` (accelerate exports it to the environment before train.py runs)."""
    return os.environ.get("ACCELERATE_MIXED_PRECISION", "").lower() == "fp8"


def check_fp8(method: str) -> None:
    """Refuse float8 where it cannot run or is not built: one line each, before any model is loaded."""
    if method == "qlora":
        raise UserError(
            "--precision fp8 does not apply to --method qlora: QLoRA's base is 4-bit, so there is no bf16 Linear for "
            "float8 to take; use --method lora --precision fp8 (bf16 base, float8 GEMMs) or --precision bf16"
        )
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":  # accelerate launch exports it for a DS config
        raise UserError(
            "--precision fp8 does not run under DeepSpeed: train.py's float8 path (torchao) is not built for DeepSpeed "
            "engines; use a DDP or FSDP config (python -m generator plan --precision fp8) or --precision bf16"
        )
    try:
        import torchao.float8  # noqa: F401
    except ImportError:
        raise UserError("--precision fp8 needs torchao: pip install 'dist-config-generator[fp8]' (torchao)") from None
    import torch

    if not torch.cuda.is_available():
        raise UserError("--precision fp8 needs a CUDA GPU with float8 tensor cores (Ada, Hopper, Blackwell); none here")
    if os.environ.get("FSDP_CPU_RAM_EFFICIENT_LOADING", "").lower() == "true":
        # accelerate 1.15's Accelerator raises for its torchao backend with FSDP2's efficient loading
        raise UserError("--precision fp8 does not work with fsdp_cpu_ram_efficient_loading: set it false in the config")
    cap = torch.cuda.get_device_capability()
    if tuple(cap) < FP8_MIN_CAPABILITY:
        raise UserError(
            f"--precision fp8 needs compute capability 8.9 or newer (Ada, Hopper, Blackwell); "
            f"{torch.cuda.get_device_name()} is {cap[0]}.{cap[1]}: use --precision bf16"
        )


def fp8_filter(module, fqn: str) -> bool:
    """True for the Linear layers float8 takes: not lm_head, not a LoRA adapter, both dims a multiple of 16.

    Under LoRA only the frozen base Linears (peft's `base_layer`) go to float8: the adapters' rank-r GEMMs are too thin
    for float8 to pay for its casts, and their weights are the ones being trained. The frozen base's weight gradient
    is never needed; torchao's backward computes it anyway, but inside the compiled layer AOTAutograd drops what no
    output needs, so the base costs its forward and input-gradient GEMMs only, as in bf16."""
    import torch

    if not isinstance(module, torch.nn.Linear):
        return False
    parts = fqn.split(".")
    if parts[-1] in FP8_SKIPPED_NAMES or any(p.startswith(LORA_ADAPTER_PREFIX) for p in parts):
        return False
    return fp8_aligned(module.in_features, module.out_features)


def fp8_config(recipe: str, fsdp2: bool):
    """torchao's Float8LinearConfig for --fp8-recipe; with FSDP2, the float8 all-gather (tensorwise only).

    Why the float8 all-gather: without it FSDP2 gathers each layer's weights in bf16 and every rank then casts the
    whole gathered weight to float8; with it each rank casts only its shard and the gather moves 1 byte per parameter
    instead of 2, halving the forward/backward all-gather traffic. The price is one all-reduce of the weights' amax per
    optimizer step (`precompute_scales`), which computes every layer's scale at once instead of one per gather."""
    from torchao.float8 import Float8LinearConfig

    if recipe == "tensorwise":
        return Float8LinearConfig(enable_fsdp_float8_all_gather=fsdp2)
    # rowwise scales per row, so a shard cannot be cast alone: torchao supports the float8 all-gather only tensorwise.
    return Float8LinearConfig.from_recipe_name(recipe)


def ao_recipe(recipe: str):
    """accelerate's handler for its torchao backend, carrying train.py's filter and config: accelerate converts the
    model inside `prepare` (before FSDP2 shards it) and, under FSDP2's float8 all-gather, recomputes the weights'
    scales after every optimizer step (one all-reduce of their amax for all layers, torchao's
    precompute_float8_dynamic_scale_for_fsdp, registered as an optimizer step hook)."""
    from accelerate.utils import AORecipeKwargs

    return AORecipeKwargs(config=fp8_config(recipe, launch_uses_fsdp2()), module_filter_func=fp8_filter)


def launch_uses_fsdp2() -> bool:
    """FSDP2 from the launch environment: the float8 config must be built before the Accelerator reads it."""
    return os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true" and os.environ.get("FSDP_VERSION") == "2"


def fp8_layer_names(model) -> list[str]:
    """The Linear layers float8 took, after prepare converted them."""
    from torchao.float8.float8_linear import Float8Linear

    return [name for name, m in model.named_modules() if isinstance(m, Float8Linear)]


def compile_layers(model) -> int:
    """Compile each decoder layer in place (torchtitan's regional compile); the number compiled.

    Why: float8's casts (amax, scale, cast, and the transposes the backward needs) are separate memory-bound kernels in
    eager mode and only fuse into their neighbours under torch.compile; on one H200 float8 tensorwise reached ~790
    bf16-equivalent TFLOP/s compiled, against ~504 for bf16 eager (issue 20). One layer's graph serves all 32, so
    compile time is one layer's, not the model's. In place (`module.compile()`), not `torch.compile(module)`: the
    returned OptimizedModule's call skips the hooks FSDP2's fully_shard adds later (accelerate's compile_regions_fsdp2
    says the same), and the layer keeps its class, which FSDP2's wrap policy matches by name."""
    import torch

    # transformers >= 5.23 checkpoints inside each layer's forward (modeling_layers.GradientCheckpointingLayer wraps
    # `forward`, not `__call__`), so the checkpoint lands in the compiled region, where the output-capturing context
    # variable the layer sets (utils/output_capturing.CompileableContextVar) is a side effect dynamo will not replay
    # in the recompute: it gave up on the whole layer and ran it eager, silently (transformers 5.25, torch 2.13:
    # tests/test_estimate_compiled_casts.py). That variable only serves output_hidden_states/attentions capture,
    # which training never asks for, so the recompute may skip it.
    if hasattr(torch._dynamo.config, "skip_fwd_side_effects_in_bwd_under_checkpoint"):
        torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True
    layers = decoder_layers(model)
    for layer in layers:
        layer.compile()
    return len(layers)


def decoder_layers(model):
    """The repeated decoder blocks (model.model.layers for Mistral/Llama), found through peft or Liger wrappers."""
    import torch

    blocks = [
        m
        for m in model.modules()
        if isinstance(m, torch.nn.ModuleList) and len(m) > 1 and len({type(c) for c in m}) == 1
    ]
    if not blocks:
        raise UserError(f"--precision fp8: found no repeated decoder layers to compile in {type(model).__name__}")
    return list(max(blocks, key=len))
