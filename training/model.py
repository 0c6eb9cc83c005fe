"""The model: config and tokenizer, the weights (pretrained, random, or random then quantised for QLoRA), LoRA
adapters, activation checkpointing and Liger kernels. Built after the Accelerator exists, so the launch config
decides where it goes."""

from __future__ import annotations

from generator.errors import UserError
from generator.model.hub import hub_offline_reason
from generator.model.types import positions_limit
from training.args import DEFAULT_LORA_TARGETS
from training.errors import first_line

LOAD_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}  # --load-dtype -> torch dtype name


def load_config_and_tokenizer(args):
    from transformers import AutoConfig, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(args.model, local_files_only=True)  # a local directory or the cache
    except Exception:
        offline = hub_offline_reason()
        if offline:
            raise UserError(
                f"cannot load model {args.model!r}: not a local directory or in the Hugging Face cache, and the hub "
                f"is offline ({offline}); pass --model DIR, a directory with config.json and the tokenizer"
            ) from None
        try:
            config = AutoConfig.from_pretrained(args.model)
        except Exception as exc:
            raise UserError(f"cannot load model {args.model!r}: {first_line(exc)}") from None
    max_len = getattr(config, "max_position_embeddings", None)
    if positions_limit(max_len) and args.seq_len > max_len:  # XLNet's -1: no limit
        raise UserError(f"--seq-len {args.seq_len} is above {args.model!r}'s max_position_embeddings {max_len}")
    try:
        try:
            tok = AutoTokenizer.from_pretrained(args.model, local_files_only=True)
        except Exception:  # not cached: the hub answered for the config above, so ask it
            tok = AutoTokenizer.from_pretrained(args.model)
    except Exception as exc:
        raise UserError(f"cannot load the tokenizer of {args.model!r}: {first_line(exc)}") from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return config, tok


def load_model(args, config, use_cuda: bool, init_device: str = "cpu", extra: dict | None = None):
    """The base model in --load-dtype; for QLoRA quantised to 4-bit NF4 (a random init is quantised in memory).
    `extra`: more from_pretrained arguments (tensor parallel's tp_plan and device_mesh: training/parallel.py)."""
    import torch
    from transformers import AutoModelForCausalLM

    if args.attn_implementation == "flex_attention" and not use_cuda:
        raise UserError("--attn-implementation flex_attention has no CPU backward in torch; use sdpa on CPU")
    kwargs = {"dtype": getattr(torch, LOAD_DTYPES[args.load_dtype]), "attn_implementation": args.attn_implementation}
    if args.method == "qlora":
        if not use_cuda:
            raise UserError("--method qlora needs a CUDA GPU (bitsandbytes 4-bit); use --method lora on CPU")
        from training.qlora import quantization_config

        kwargs["quantization_config"] = quantization_config()
        if init_device != "cpu":  # DDP: each rank quantises onto its own GPU
            kwargs["device_map"] = {"": init_device}
    try:
        if args.init == "random" and args.method == "qlora":
            from training.qlora import quantised_random_model

            model = quantised_random_model(config, init_device, **kwargs)
        elif args.init == "random":
            with torch.device(init_device):  # random init straight on the GPU: minutes faster than CPU for 7B
                model = AutoModelForCausalLM.from_config(config, **kwargs)
            snap_to_bf16_grid(model)
        else:
            model = AutoModelForCausalLM.from_pretrained(args.model, config=config, **kwargs, **(extra or {}))
            if args.method == "qlora":  # bitsandbytes left fused MoE experts in bf16 (training/moe.py)
                from training.moe import quantise_experts, routed_experts

                device = next(model.parameters()).device
                quantise_experts(model, routed_experts(config), kwargs["quantization_config"], device)
    except (OSError, ValueError, ImportError, KeyError) as exc:
        raise UserError(f"cannot load model {args.model!r}: {first_line(exc)}") from None
    model.config.use_cache = False
    return model


def snap_to_bf16_grid(model) -> None:
    """Round fp32 random weights to bf16-representable values, as a checkpoint stored in bf16 (Mistral's, Llama's) is.

    Why: DeepSpeed casts the module to bf16 and builds its fp32 masters from that, so its masters start on the bf16
    grid, while DDP and FSDP kept the raw fp32 init. With updates far below one bf16 step (lr 1e-5 on weights of
    ~0.02, a step of ~1e-4), raw fp32 masters cross a rounding boundary at once in a fraction of weights and grid
    masters only after several steps. On 2x H200 without this rounding, ZeRO-1/2 trailed DDP/FSDP2 (loss 10.77 vs
    7.92 at step 3) with identical gradient norms; with it, DDP and FSDP2 follow the unchanged ZeRO-1/2 curve within
    0.07 at every step (bench/results/h200-x2-2026-11-30-bf16init.json). Parameters zero.Init already partitioned
    are left alone: DeepSpeed rounds them itself."""
    import torch

    with torch.no_grad():
        for p in model.parameters():
            if p.dtype == torch.float32 and not hasattr(p, "ds_id"):
                p.copy_(p.to(torch.bfloat16))


def add_adapters(model, args, grad_checkpointing: bool):
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    if args.method == "qlora":
        model = prepare_model_for_kbit_training(
            model,
            use_gradient_checkpointing=grad_checkpointing,
            gradient_checkpointing_kwargs={"use_reentrant": False},
        )
    targets = "all-linear" if args.lora_targets == "all-linear" else args.lora_targets.split(",")
    note = None
    if args.lora_targets == DEFAULT_LORA_TARGETS:
        targets, note = experts_kept_off(model, linear_targets(model, targets))
    cfg = LoraConfig(
        r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=0.0, target_modules=targets, task_type="CAUSAL_LM"
    )
    try:
        return get_peft_model(model, cfg), note
    except ValueError as exc:
        raise UserError(f"--lora-targets {args.lora_targets!r}: {first_line(exc)}") from None


def experts_kept_off(model, targets: list[str]) -> tuple[list[str], str | None]:
    """train.py's default targets on a mixture of experts, and its line naming what is left out (None where nothing
    is): never the fused routed experts, and the same adapters under peft 0.21 and 0.22, the ones the estimate prices
    (generator/catalog/peft_moe.py default_moe_targets: the MLP names left out where peft 0.21 moves them onto the
    experts, else named by parent, as shared_expert.gate_proj, since 0.22 adapts the experts through a bare name even
    where it keeps the Linears). The result is then converted as get_peft_model converts it: names that would still
    reach a parameter (a type transformers converts that the table does not list yet) are left out too."""
    import torch

    from generator.catalog.peft_moe import MOVED_NAMES, default_moe_targets
    from training.moe import routed_experts

    if not routed_experts(model.config):
        return targets, None
    model_type = str(getattr(model.config, "model_type", ""))
    linears = [name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    kept, left_out = default_moe_targets(model_type, targets, linears)
    if kept != targets and _reaches_parameters(model, kept):
        left_out = [t for t in targets if t.removesuffix("_proj") in MOVED_NAMES]
        kept = [t for t in targets if t not in left_out]
    if not left_out:
        return kept, None
    return kept, (
        f"LoRA: {', '.join(left_out)} left out: through them peft would adapt {model_type}'s fused routed experts (a "
        f"weight gradient for every expert, which the plan does not price); adapting {', '.join(kept)}. "
        "--lora-targets names them to train the experts anyway."
    )


def _reaches_parameters(model, targets: list[str]) -> bool:
    """Whether the installed peft's conversion of `targets` for this model (the one get_peft_model runs, here on a
    probe config) adapts any parameter (target_parameters); False for a peft without it (before 0.21)."""
    from peft import LoraConfig

    try:
        from peft.utils.transformers_weight_conversion import (
            convert_peft_config_for_transformers,
            get_model_conversion_mapping,
        )
    except ImportError:
        return False
    probe = LoraConfig(r=8, target_modules=list(targets))
    convert_peft_config_for_transformers(probe, model=model, conversions=get_model_conversion_mapping(model))
    return bool(probe.target_parameters)


def linear_targets(model, names: list[str]) -> list[str]:
    """The default targets that name nn.Linear layers of this model (all of them in the llama family). On an MoE with
    no Linear of the MLP names (OLMoE, Qwen3-MoE, Mixtral: fused experts only) that drops gate/up/down_proj, which
    peft would turn into adapters on every routed expert (OLMoE's default config at r=16: 268M adapter parameters
    under 0.21.2 and 0.22.0 alike), which neither the estimate nor Mixtral's run does; an explicit --lora-targets
    still reaches them. Unchanged where none is a Linear (peft then names the problem)."""
    import torch

    present = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    return [n for n in names if n in present] or names


def apply_liger(model, inside_layers: bool = True) -> str | None:
    """Liger's kernels; `inside_layers=False` keeps only its fused linear cross-entropy (the loss, outside the decoder).
    Returns train.py's note for an architecture Liger is not measured on (generator/catalog/liger.py), else None.

    Why the loss only when the decoder layers are compiled: torch.compile fuses the norms, SwiGLU and RoPE itself,
    and Liger's RMSNorm and SwiGLU backward kernels write their gradients into their inputs' buffers (in place), which
    a compiled graph's own buffer reuse does not expect (Liger-Kernel#370; tritonbench#486 turns in_place off for
    the same reason). The fused cross-entropy runs outside the compiled layers and keeps the logits unmaterialised."""
    try:
        from liger_kernel.transformers import _apply_liger_kernel_to_instance
    except ImportError:
        raise UserError("--liger needs liger-kernel: pip install liger-kernel") from None
    # An MoE's experts never take Liger's fused experts kernel (LigerExperts): its Triton GEMMs autotune 32 configs
    # each, the weight-gradient ones 16, compiled and benchmarked in the first step, which did not finish in 5
    # minutes on Mixtral (issue 26; generator/catalog/liger.py has the evidence). transformers' grouped_mm stays.
    moe = bool(getattr(model.config, "num_local_experts", 0) or getattr(model.config, "num_experts", 0))
    if inside_layers:
        _apply_liger_kernel_to_instance(model=model, **({"swiglu": False} if moe else {}))
    else:
        _apply_liger_kernel_to_instance(model=model, rope=False, rms_norm=False, swiglu=False)
    from generator.catalog.liger import liger_run_note

    return liger_run_note(str(getattr(model.config, "model_type", "")))


def enable_grad_checkpointing(model) -> None:
    """HF activation checkpointing, non-reentrant, under whichever name this transformers version gives it."""
    enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5.x name
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def count_params(model) -> tuple[int, int]:
    """(all, trainable), counting ZeRO-3 partitioned parameters at their full size."""
    n_params = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())
    n_trainable = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters() if p.requires_grad)
    return n_params, n_trainable
