"""Host rows of a named model's own decoder layer (`probe --compute --model M`): the CPU time to issue M's layer's
kernels, timed as compute_host times the tiny Mistral's (four depths, interleaved rounds, train.py's step).

Why M's own: the shipped host rows time a Mistral layer, and the planner priced every model's host time with them.
An MoE layer issues its router, top-k, the sort into expert order, the gathers and scatters and their backward on
top of a dense layer's kernels; Qwen3's q/k norms and Gemma's extra norms add kernels too. On one H200 (2026-12-04)
Qwen3-30B-A3B LoRA in float8 at 2,048 x 2 ran 0.29 s a step against 0.20 predicted, the estimator calling the step
host-bound on the Mistral row (bench/REPORT.md cause 5).

The layer is transformers' own, built from M's config with its structure kept (model type, expert count, top-k,
biases, norms, attention layout MHA or grouped) and its widths cut to the probe's tiny ones, so the GPU finishes each
kernel before the next is issued: the wall time is the host's. The rows carry M's key (model type, experts, top-k);
estimate.compute_table reads them for that model ahead of the Mistral rows.
"""

from __future__ import annotations

import time

import torch

from generator.estimate.host_time import mistral_like
from generator.model.loading import EXPERT_WIDTH_KEYS
from generator.model.types import ModelSpec
from generator.probe.clock import Clock
from generator.probe.compute_host import (
    HEAD_DIM,
    HEADS,
    HIDDEN,
    INTER,
    KV_HEADS,
    TOKENS,
    have_transformers,
    hf_row,
    train_py_model,
)
from generator.probe.compute_layers import attn_implementation, config_at, hf_config_dict

EXPERT_WIDTHS = (*EXPERT_WIDTH_KEYS, "shared_expert_intermediate_size")


def host_config(cfg: dict, layers: int):
    """The transformers config of `layers` of M's decoder layers at the probe's tiny widths, M's structure kept."""
    mha = cfg.get("num_key_value_heads") in (None, cfg.get("num_attention_heads"))
    widths = dict(hidden_size=HIDDEN, intermediate_size=INTER, num_attention_heads=HEADS, head_dim=HEAD_DIM,
                  num_key_value_heads=HEADS if mha else KV_HEADS, max_position_embeddings=4 * TOKENS)  # fmt: skip
    widths.update({k: INTER // 2 for k in EXPERT_WIDTHS if cfg.get(k)})
    return config_at(cfg, layers, **widths)


def _builder(cfg: dict, moe: bool):
    def build(clock: Clock, variant: str, layers: int, compiled: bool, liger: bool = False):
        from transformers import AutoModelForCausalLM

        # full: fp32 masters as train.py loads them, except an MoE's, whose experts train.py casts to bf16 for
        # compute each forward (training/moe.py): a bf16 model takes the same grouped path, less two casts a layer
        dtype = clock.half if variant == "lora" or moe else torch.float32
        config = host_config(cfg, layers)
        attn = attn_implementation(config, clock.device == "cuda")
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn)
        return train_py_model(model.to(clock.device), variant, compiled, liger, moe=moe)

    return build


def model_host_rows(
    clock: Clock, model: ModelSpec, cfg: dict, compiled: bool, liger: bool, budget_s: float, rounds: int
) -> list[dict]:
    """M's own rows, eager LoRA and full, then compiled (if `compiled`), then with Liger's kernels (if `liger`), each
    tagged with M's key, until the time box; what the box or the build cuts is listed in clock.skipped."""
    build, rows, t_end = _builder(cfg, model.num_experts > 0), [], time.monotonic() + budget_s
    kinds = [(False, False)] + [(True, False)] * compiled + [(False, True)] * liger
    for is_compiled, with_liger in kinds:
        for variant in ("lora", "full"):
            name = f"host {model.name} {variant} compiled={is_compiled} liger={with_liger}"
            if clock.cut(name, t_end):
                continue
            try:
                row = hf_row(clock, variant, is_compiled, with_liger, rounds, build=build)
            except Exception as exc:  # an architecture Liger or this transformers does not take, ...
                clock.skip(name, exc)
                continue
            rows.append({**row, "layer": "transformers, own", "model": model.name, "model_type": model.model_type,
                         "experts": model.num_experts, "top_k": model.experts_per_token})  # fmt: skip
    return rows


def _liger_takes(model_type: str) -> bool:
    """Whether the installed liger-kernel patches this architecture (it leaves any other as it was)."""
    try:
        from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN
    except ImportError:
        return False
    return model_type in MODEL_TYPE_TO_APPLY_LIGER_FN


def own_host_rows(clock: Clock, model: ModelSpec | None, budget_s: float, compiled: bool, rounds: int) -> list[dict]:
    """--model's own host rows where its layer is not the tiny Mistral's, in `budget_s` (0: none); on the CPU eager
    LoRA and full at two rounds (the plumbing, in tests)."""
    if model is None or mistral_like(model):
        return []
    cuda = clock.device == "cuda"
    cfg = hf_config_dict(model.name)
    if cfg is None or not have_transformers() or (cuda and budget_s <= 0):
        why = "no config.json to build it from" if cfg is None else "not at this effort or without transformers"
        clock.skipped.append(f"host rows of {model.name}'s own layer: {why} (the Mistral layer's rows price it)")
        return []
    return model_host_rows(clock, model, cfg, compiled=cuda and compiled, liger=cuda and _liger_takes(model.model_type),
                           budget_s=budget_s if cuda else 60.0, rounds=rounds if cuda else 2)  # fmt: skip
