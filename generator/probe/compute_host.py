"""Host section of `probe --compute`: the CPU time eager PyTorch takes to issue one decoder layer's kernels, forward
and forward + backward, measured on shapes so small that the GPU finishes each kernel before the next is issued.

A step whose GPU work per layer is shorter than this waits on the host (issue 20's seq-2048 micro-batch-1 rows ran
0.04-0.10 s a step slower than their GPU time); the estimator takes the larger of the two per micro-step
(estimate.compute_time). Where transformers is installed the layer is transformers' own MistralDecoderLayer in a
tiny MistralForCausalLM (peft's LoRA on all seven projections for the lora variant), timed at four depths in
interleaved rounds and fitted by least squares, so the embedding, mask, lm_head and loss drop out of the per-layer
figure; otherwise a stand-in written op for op as that layer runs eagerly (compute_host_standin.py). `compiled`:
each layer under torch.compile (train.py --compile-layers; fp8 always). `liger` (where liger-kernel is installed,
eager layers only, as train.py applies it): Liger's RMSNorm, RoPE, SwiGLU and fused cross-entropy, whose Triton
kernels and Python autograd functions cost the host more per layer than the aten ops they replace.

The real layer is timed as train.py runs a step: forward, backward, gradient clipping and fused AdamW, so
`fwdbwd_ms_per_layer` holds the optimizer's per-layer share, and `step_ms` what does not grow with depth (embedding,
mask, lm_head and loss, the optimizer's fixed part): the host's per-step time outside the layers. Profiled on one
H200 (bench/results/profile-h200-2026-12-02-b/): a 2,048-token LoRA step's GPU kernels summed to the 139 ms the
operators predict, and the step took 224 ms, its host's.
"""

from __future__ import annotations

import contextlib
import statistics
import time

import torch
from torch import nn

from generator.catalog.peft_moe import default_moe_targets
from generator.probe.clock import Clock

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER, TOKENS, LAYERS = 128, 4, 2, 32, 256, 64, 8
DEPTHS = (2, 4, 6, 8)
"""Depths of the real model timed for the host rows: the per-layer time is the slope over all four."""
ROUNDS = 12
"""Interleaved rounds per depth (each round times a forward and a whole step at every depth, BURST times each)."""
BURST = 3
"""Back-to-back calls per visit; the first of each visit runs on cold caches and is not kept (_interleaved)."""


def _hf_model(clock: Clock, variant: str, layers: int, compiled: bool, liger: bool = False):
    """A tiny MistralForCausalLM as train.py runs it (train_py_model)."""
    from transformers import MistralConfig, MistralForCausalLM

    cfg = MistralConfig(hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=layers,
                        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, vocab_size=512,
                        max_position_embeddings=4 * TOKENS, attn_implementation="sdpa")  # fmt: skip
    dtype = clock.half if variant == "lora" else torch.float32
    return train_py_model(MistralForCausalLM(cfg).to(device=clock.device, dtype=dtype), variant, compiled, liger)


LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""train.py's default LoRA targets, kept where the model has them as nn.Linear (training/model.py linear_targets)."""


def train_py_model(model, variant: str, compiled: bool, liger: bool, moe: bool = False):
    """`model` with train.py's levers on it: fp32 weights for full, a bf16 base under peft's LoRA (its default targets
    that are Linears here; all-linear, as the plan prints it, where none is), Liger's kernels applied to the base
    model first (training/model.py apply_liger: an MoE's SwiGLU stays transformers'), and each decoder layer compiled
    in place (training/precision.py compile_layers)."""
    model.config.use_cache = False
    if liger:
        from liger_kernel.transformers import _apply_liger_kernel_to_instance

        _apply_liger_kernel_to_instance(model=model, **({"swiglu": False} if moe else {}))
    if variant == "lora":
        from peft import LoraConfig, get_peft_model

        linears = [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]
        present = {name.rsplit(".", 1)[-1] for name in linears}
        targets = [t for t in LORA_TARGETS if t in present] or "all-linear"  # the plan's targets for such a model
        if moe and targets != "all-linear":  # as train.py: no adapter on the fused routed experts (catalog.peft_moe)
            targets = default_moe_targets(str(model.config.model_type), targets, linears)[0]
        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=targets))
    if compiled:
        layers = model.config.num_hidden_layers
        blocks = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) == layers]
        for layer in blocks[0]:
            layer.compile()
    return model


def _interleaved(clock: Clock, fns: list, rounds: int, burst: int = BURST) -> list[list[float]]:
    """Wall seconds of each fn() (synchronised), timed in rounds whose order rotates, so a drift in the host's speed
    (another tenant, a clock change) lands on every depth alike instead of on one depth's block. Each visit runs fn
    `burst` times back to back and keeps all but the first: a training loop repeats one model's step, and the first
    call after switching models ran on cold CPU caches (one H200 machine, 2026-12-03: one call per visit priced the
    LoRA layer at 7.5-7.9 ms, the minima at 6.0-6.6, and train.py's steps at about 6)."""
    for fn in fns:
        for _ in range(3):  # lazy init, the optimizer's states, the allocator's first blocks, compiled graphs
            fn()
    clock.sync()
    times: list[list[float]] = [[] for _ in fns]
    for r in range(rounds):
        for j in range(len(fns)):
            i = (j + r) % len(fns)
            for k in range(burst):
                t0 = time.perf_counter()
                fns[i]()
                clock.sync()
                if k or burst == 1:
                    times[i].append(time.perf_counter() - t0)
    return times


def _line(xs: tuple[int, ...], ys: list[float]) -> tuple[float, float]:
    """Least-squares (slope, intercept) of ys over xs."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return slope, my - slope * mx


def _quartiles(v: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(v, n=4)
    return q[0], statistics.median(v), q[2]


def hf_row(clock: Clock, variant: str, compiled: bool, liger: bool = False, rounds: int = ROUNDS, build=None) -> dict:
    """Per-layer host time: the slope of the median step time over DEPTHS (least squares), timed in interleaved
    rounds; the intercept is the step's host time outside the layers. Two depths and seven repeats (the former probe)
    read 7.8 and 3.9 ms for one layer on one machine five minutes apart (bench/results/host-rows-twice-h200-2026-12-03
    .json): a difference of two medians of a noisy host. The row also keeps the slope of the minima and the quartile
    spread of the deepest step, so a reader sees how noisy the host was. `build(clock, variant, depth, compiled,
    liger)` gives the model at each depth: the tiny Mistral unless given (compute_host_model: a named model's own)."""
    ids = torch.randint(0, 512, (1, TOKENS), device=clock.device)
    autocast = clock.autocast()
    fns = []
    for depth in DEPTHS:
        model = (build or _hf_model)(clock, variant, depth, compiled, liger)
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-6, fused=clock.device == "cuda")  # train.py's optimizer

        def forward(model=model):
            with autocast:
                return model(input_ids=ids, labels=ids).loss

        def step(forward=forward, model=model, opt=opt):
            loss = forward()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.item()  # train.py reads the loss every step

        fns += [forward, step]
    times = _interleaved(clock, fns, rounds)
    fwd_t, step_t = times[0::2], times[1::2]
    fwd, _ = _line(DEPTHS, [statistics.median(t) for t in fwd_t])
    total, rest = _line(DEPTHS, [statistics.median(t) for t in step_t])
    low, _ = _line(DEPTHS, [min(t) for t in step_t])
    q1, med, q3 = _quartiles(step_t[-1])
    return {"variant": variant, "compiled": compiled, "liger": liger, "layers": DEPTHS[-1] - DEPTHS[0],
            "depths": list(DEPTHS), "rounds": rounds, "burst": BURST, "tokens": TOKENS, "layer": "transformers",
            "fwd_ms_per_layer": round(max(fwd, 0.0) * 1e3, 4), "fwdbwd_ms_per_layer": round(max(total, 0.0) * 1e3, 4),
            "step_ms": round(max(rest, 0.0) * 1e3, 4), "min_fwdbwd_ms_per_layer": round(max(low, 0.0) * 1e3, 4),
            "spread_pct": round(100.0 * (q3 - q1) / med, 1)}  # fmt: skip


def _have_liger() -> bool:
    try:
        import liger_kernel  # noqa: F401
    except ImportError:
        return False
    return True


def have_transformers() -> bool:
    try:
        import peft  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def host_rows(clock: Clock, compiled: bool, budget_s: float, rounds: int | None = None) -> list[dict]:
    """Per-layer host time of the eager layer, full and LoRA, then (if `compiled`) the compiled layer, then the eager
    layer with Liger's kernels where liger-kernel is installed: transformers' own layer where it is installed (on a
    GPU), else the stand-in (no Liger rows)."""
    from generator.probe.compute_host_standin import variant_row  # it reads this module's widths

    rows, t_end = [], time.monotonic() + budget_s
    real = clock.device == "cuda" and have_transformers()  # CPU mode (tests) times the quicker stand-in
    # Liger's patch swaps transformers' module-level RMSNorm, MLP and RoPE for every model built after it, so its
    # rows come last (run first, they leaked its kernels into the compiled rows: 2026-12-03, 1.8x the host time).
    kinds = [(False, False)] + [(True, False)] * compiled + [(False, True)] * (real and _have_liger())
    for is_compiled, liger in kinds:
        for variant in ("lora", "full"):  # LoRA first: its host floor binds most often (short LoRA steps)
            name = f"host {variant} compiled={is_compiled} liger={liger}"
            if clock.cut(f"{name}", t_end):
                continue
            try:
                row = (hf_row(clock, variant, is_compiled, liger, rounds or ROUNDS) if real
                       else variant_row(clock, variant, is_compiled))  # fmt: skip
                rows.append(row)
            except Exception as exc:  # no inductor toolchain, a transformers without Mistral, say
                clock.skip(name, exc)
                if not liger:  # the stand-in has no Liger twin
                    with contextlib.suppress(Exception):  # the stand-in failed too: nothing measured for this variant
                        rows.append(variant_row(clock, variant, is_compiled))
    return rows
