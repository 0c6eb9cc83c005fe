"""Layer section of `probe --compute`: transformers' own decoder layers at a model's real widths, timed whole on the
GPU, forward and forward + backward, per layer (the difference of two depths, so the embedding drops out).

A mixture-of-experts layer is more than its grouped GEMMs: the router, the sort into expert order, the gathers there
and back, the weighting and their backward (scatter-adds) run around them, and transformers' grouped_mm path for the
weight gradient is not the forward's kernel. Priced op by op from the GEMM rows, Mixtral cut to 4 and 8 layers ran
26-35% slower than predicted on one H200 (bench/results/h200-x1-families-2026-12-01.json), so an MoE model's decoder
layers are priced from these rows where the table has them (estimate.compute_time). Built as train.py builds a random
init (`AutoModelForCausalLM.from_config`, bf16, SDPA, transformers' default experts implementation), on `mb x seq`
tokens; variant `full` trains every weight, `frozen` none (LoRA's base: input gradients only). Each is timed once
more with the layers under transformers' non-reentrant checkpointing (train.py's): on one H200 that time is the
forward twice plus the backward within 1-4% from 8,192 tokens up, but not below it (bench/results/qlora-layers-ckpt-
h200-2026-12-03.json). On the CPU (tests) the widths are cut to a toy.

`--full` also times each variant with every decoder layer compiled as train.py compiles them (training/precision.py
compile_layers: `layer.compile()` in place), a row marked `compiled`: float8 and `--compile-layers` run the layers
compiled, and what compile fuses in an MoE layer (the router's softmax and top-k, the gathers and scatters around
the grouped GEMMs, SwiGLU) is the dispatch the eager row measures and the operators do not count, so the eager row
plus the operators' difference cannot price it (Mixtral cut to 8 layers, LoRA in float8: 14% slow so priced,
bench/results/h200-x1-families-2026-12-02.json).

`--full --model M` also times M's layers (dense or MoE) with train.py's float8 Linears, compiled, a row marked
`precision: fp8`, fully trained at fp32 weights under bf16 autocast (train.py's full fine-tune) and frozen at bf16
(LoRA's base). Float8's cost beside its GEMMs is not the casts' elements at one rate: on an H100 Mistral-7B's layer
spent 2.4 ms beside its GEMMs where the casts are priced 1.2, Phi's 2.6 where they are priced 0.9, and Phi's float8
layer ran 1.04x its bf16 one where the operators give about 1.3x (bench/results/h100-x1-fp8-layer-rows-*-2026-12-06
.json), so a model's own float8 row prices its float8 layers where the table has one (estimate.layer_rows.anchor).
"""

from __future__ import annotations

import json
import time
from itertools import product
from pathlib import Path

import torch

from generator.estimate.attention import TRANSFORMERS_NAMES, probe_attention
from generator.model.config_dims import expert_count
from generator.model.loading import EXPERT_WIDTH_KEYS
from generator.model.meta import class_attentions
from generator.probe.clock import Clock, per_layer
from generator.probe.compute_grid import LAYER_TOKENS

DEPTHS = (1, 3)
CPU_TOKENS = (1, 64)
CPU_WIDTHS = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 16, "num_local_experts": 4}  # fmt: skip
VARIANTS = ("frozen", "full")


def hf_config_dict(name_or_dir: str) -> dict | None:
    """The transformers config of a preset, a local model directory or a config.json-like file (as `plan --model`
    takes them); None for anything else (a hub id: the probe reads nothing from the network)."""
    from generator.model.presets import PRESETS, preset_config

    if name_or_dir in PRESETS:
        return {k: v for k, v in preset_config(name_or_dir).items() if not k.startswith("_")}
    path = Path(name_or_dir)
    path = path / "config.json" if path.is_dir() else path
    if not path.is_file() or path.suffix != ".json":
        return None
    return {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith("_")}


CONFIG_DROPPED = (
    "model_type",
    "architectures",
    "auto_map",
    "layer_types",
    "torch_dtype",
    "dtype",
    "quantization_config",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
)
"""Config keys a cut copy does not take: identity (passed apart), per-layer lists sized for the real depth (rebuilt
by the config class for the cut one), the stored dtype, a checkpoint's quantisation, and token ids beyond the
512-token vocabulary (a pad id there fails the embedding's build)."""


def config_at(cfg: dict, layers: int, **widths):
    """The transformers config of `layers` of the model's decoder layers with `widths` in place of its own, a small
    vocabulary (the lm_head is priced from GEMM rows)."""
    from transformers import CONFIG_MAPPING, AutoConfig

    d = {k: v for k, v in cfg.items() if k not in CONFIG_DROPPED}
    config_class = CONFIG_MAPPING[cfg["model_type"]]
    # a width the class derives (Falcon's head_dim is a property of hidden_size and heads) is not set
    d.update({k: v for k, v in widths.items() if not isinstance(getattr(config_class, k, None), property)})
    # pad_token_id=None: the class's default may lie past the cut vocabulary too (Phi-3's 32000)
    d.update(num_hidden_layers=layers, vocab_size=512, use_cache=False, pad_token_id=None)
    return AutoConfig.for_model(cfg["model_type"], **d)


def attn_implementation(config, cuda: bool) -> str:
    """transformers' name of the kernel a row runs `config`'s layers with (estimate.attention.probe_attention): on
    the CPU (tests) eager where the class has no SDPA, sparing flex's compile."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    attentions = class_attentions(MODEL_FOR_CAUSAL_LM_MAPPING[type(config)])
    kernel = probe_attention(attentions) if cuda or "sdpa" in attentions else "eager"
    return TRANSFORMERS_NAMES[kernel]


def layer_config(cfg: dict, layers: int, cpu: bool):
    """The transformers config of `layers` decoder layers at the model's widths (a toy's on CPU)."""
    toy = {k: v for k, v in CPU_WIDTHS.items() if k != "num_local_experts" or k in cfg}
    return config_at(cfg, layers, **(toy if cpu else {}))


def checkpointed(model, timed):
    """`timed` again with each decoder layer under transformers' non-reentrant checkpointing, as train.py runs it."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    try:
        return timed()
    finally:
        model.gradient_checkpointing_disable()


def weights_dtype(variant: str, fp8: bool):
    """The weights a row runs at: bf16, but a float8 full fine-tune's fp32 (train.py loads a full fine-tune's weights
    in fp32 and runs the step under bf16 autocast; torchao casts an fp32 weight to float8 itself)."""
    return torch.float32 if fp8 and variant == "full" else torch.bfloat16


def float8_linears(body) -> int:
    """How many of the decoder layers' Linears train.py's float8 conversion takes, converting them in place."""
    from torchao.float8.float8_linear import Float8Linear

    from generator.model.compiled_count import to_float8

    return sum(isinstance(m, Float8Linear) for m in to_float8(body).modules())


def layer_seconds(
    clock: Clock, cfg: dict, variant: str, tokens: tuple[int, int], compiled: bool = False, fp8: bool = False,
    weights=None, inspect=None, adapters=None,
) -> tuple[tuple[float, ...], dict]:  # fmt: skip
    """Per layer (forward, forward + backward, checkpointed) seconds and the widths keying the row; `fp8`: with
    train.py's float8 Linears; `weights`: their dtype (default weights_dtype's), run under bf16 autocast where fp32
    or float8; `inspect(both)` is called once at the deeper depth (bench/scripts/fp8_layer_rows.py profiles it);
    `adapters(model) -> model` adds LoRA adapters before float8 and compile take the layer, as train.py orders them,
    and the layer then runs under bf16 autocast as train.py's LoRA step does (bench/scripts/lora_layer_gap.py)."""
    from transformers import AutoModelForCausalLM

    cpu = clock.device != "cuda"
    weights = weights or weights_dtype(variant, fp8)
    autocast = fp8 or weights == torch.float32 or adapters is not None
    times: dict[int, tuple[float, float, float]] = {}
    for depth in DEPTHS:
        config = layer_config(cfg, depth, cpu)
        if weights == torch.float32 and expert_count(config):
            # transformers runs fp32 experts in its per-expert fp32 loop; train.py casts them to bf16 each forward
            # (training/moe.py), which this package does not import: such a row would time neither
            raise ValueError("an MoE's experts at fp32 weights: not timed (train.py casts them to bf16 each forward)")
        with torch.device(clock.device):
            model = AutoModelForCausalLM.from_config(
                config, dtype=weights, attn_implementation=attn_implementation(config, not cpu)
            )
        model.get_decoder().requires_grad_(variant == "full")
        if adapters is not None:  # peft leaves only its adapters trainable
            model = adapters(model)
        body = model.get_decoder().train()
        if fp8 and not float8_linears(body):
            raise ValueError("no decoder Linear float8 takes (dims not multiples of 16)")
        if compiled:  # train.py's regional compile; the clock's warm-up calls pay the compile
            for layer in body.layers:
                layer.compile()
        x = torch.randn(*tokens, config.hidden_size, device=clock.device, dtype=weights, requires_grad=True)
        grad = torch.randn_like(x)

        def forward(body=body, x=x):
            with torch.autocast(clock.device, dtype=torch.bfloat16, enabled=autocast):
                return body(inputs_embeds=x).last_hidden_state

        def both(forward=forward, grad=grad, body=body):
            forward().to(grad.dtype).backward(grad)
            body.zero_grad(set_to_none=True)

        times[depth] = (clock.time(forward), clock.time(both), checkpointed(model, lambda both=both: clock.time(both)))
        if inspect is not None and depth == DEPTHS[-1]:
            inspect(both)
        del model, body, x, grad
        if clock.device == "cuda":
            torch.cuda.empty_cache()
    return per_layer(times[DEPTHS[0]], times[DEPTHS[1]], DEPTHS[1] - DEPTHS[0]), layer_dims(config)


def layer_row(
    model: str, model_type: str, dims: dict, variant: str, tokens: tuple[int, int], seconds, compiled: bool = False,
    fp8: bool = False,
) -> dict:  # fmt: skip
    """One row of the table's `layers` (estimate.compute_table reads it): `seconds` per layer are (forward, forward +
    backward, forward + backward checkpointed), as per_layer gives them."""
    fwd, both, ckpt = (round(s * 1e3, 4) for s in seconds)
    precision = {"precision": "fp8", "weights": "fp32" if weights_dtype(variant, fp8) == torch.float32 else "bf16"}
    return {"model": model, "model_type": model_type, **dims, "variant": variant, "compiled": compiled,
            **(precision if fp8 else {}), "mb": tokens[0], "seq": tokens[1], "depths": list(DEPTHS),
            "fwd_ms_per_layer": fwd, "fwdbwd_ms_per_layer": both, "ckpt_ms_per_layer": ckpt}  # fmt: skip


def layer_dims(config) -> dict:
    """The widths that key a layer row (estimate.compute_table: `layers`), named as the planner's ModelSpec names them
    (generator/model/loading.py): an MoE's `intermediate` is its experts' width where the config gives one apart from
    the dense MLP's (Qwen3-MoE's moe_intermediate_size 768 beside an unused intermediate_size 6144)."""
    experts = expert_count(config)
    width = next((getattr(config, k) for k in EXPERT_WIDTH_KEYS if experts and getattr(config, k, None)), 0)
    return {"hidden": config.hidden_size, "intermediate": width or config.intermediate_size,
            "heads": config.num_attention_heads, "kv_heads": config.num_key_value_heads, "experts": experts,
            "top_k": getattr(config, "num_experts_per_tok", 0) or 0}  # fmt: skip


def layer_rows(clock: Clock, models: list[tuple[str, dict]], budget_s: float, compiled: bool = False,
               sizes: tuple[tuple[int, int], ...] = (LAYER_TOKENS,), fp8: bool = False) -> list[dict]:  # fmt: skip
    """Rows for each (name, transformers config dict), both variants (and each compiled too where `compiled`), at
    each (micro-batch, sequence) of `sizes` (the first for every model before the next), until the time box; `fp8`:
    the float8 rows alone (compiled on the GPU, as train.py always runs float8)."""
    cuda = clock.device == "cuda"
    sizes = sizes if cuda else (CPU_TOKENS,)
    rows, t_end = [], time.monotonic() + budget_s
    modes = (cuda,) if fp8 else (False, True) if compiled else (False,)
    variants = VARIANTS if cuda or fp8 else VARIANTS[:1]  # CPU (tests): the plumbing, once (float8: both weights)
    for tokens, (name, cfg), variant, mode in product(sizes, models, variants, modes):
        label = f"layer {name} {variant}" + (" fp8" if fp8 else "") + (" compiled" if mode else "")
        if clock.cut(f"{label} {tokens[0]}x{tokens[1]}", t_end):
            continue
        try:
            seconds, dims = layer_seconds(clock, cfg, variant, tokens, mode, fp8)
        except Exception as exc:  # an architecture this transformers cannot build, out of memory, ...
            clock.skip(f"{label} {tokens[0]}x{tokens[1]}", exc)
            continue
        rows.append(layer_row(name, cfg["model_type"], dims, variant, tokens, seconds, mode, fp8))
    return rows
