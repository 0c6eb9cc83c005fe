"""What a LoRA step's decoder layer costs beyond the layer row that prices it: one decoder layer at a model's real
widths timed (and its kernels summed) as the probe's `frozen` row runs it (bf16 weights, no autocast, no adapters:
generator/probe/compute_layers.py), under bf16 autocast alone, with train.py's adapters alone, and with both, as
train.py runs a LoRA step. Per layer: the difference of two depths (compute_layers.DEPTHS).

A row-priced MoE's LoRA step adds the adapters' rank-r GEMMs and peft's memory-bound passes
(generator/estimate/step_traffic.py adapter_bytes, fitted on dense Mistral rows) to the frozen row; Qwen1.5-MoE's
steps still ran 12-16% slower than so priced (bench/README, Next 5). The `lora_autocast` less `row` column is what
those two terms should hold; the kernel sums say which kernels the rest is.

`--compiled` adds the layer as train.py compiles it, by the probe's own timing (compute_layers.layer_seconds, the code
that times the rows the estimate reads): the compiled frozen row, the same with train.py's adapters under autocast,
and both again with train.py's float8 Linears (the frozen base only). A compiled or float8 LoRA step is priced as that
row plus the adapters from the operators (their GEMMs and `adapter_bytes` less the fraction compile fuses,
COMPILED_ADAPTER_FUSED). That fraction sat at 1.0, fitted on one compiled Mistral-7B step, and the LoRA steps priced
from a model's own layer rows read 3-15% fast; since 2026-12-07 bench/fit_compute.py fits it on this script's pairs.

    python bench/scripts/lora_layer_gap.py --model bench/models/qwen1.5-moe-a2.7b.json --tokens 2x4096 --out gap.json
    python bench/scripts/lora_layer_gap.py --model bench/models/phi-default.json --tokens 8x2048 --compiled --out p.json
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from generator.probe.clock import Clock, per_layer  # noqa: E402
from generator.probe.compute_layers import (  # noqa: E402
    DEPTHS,
    attn_implementation,
    hf_config_dict,
    layer_config,
    layer_seconds,
)
from training.args import DEFAULT_LORA_TARGETS  # noqa: E402

VARIANTS = {"row": (False, False), "autocast": (False, True), "lora": (True, False), "lora_autocast": (True, True)}
"""name: (train.py's adapters, bf16 autocast)."""
COMPILED = {"compiled_row": (False, False), "compiled_lora": (True, False), "fp8_row": (False, True),
            "fp8_lora": (True, True)}  # fmt: skip
"""name: (train.py's adapters, float8 Linears); each layer compiled as train.py compiles it."""
KINDS = (
    ("gemm", ("gemm", "nvjet", "cutlass", "xmma", "cublas", "grouped")),
    ("attention", ("sdpa", "flash", "fmha", "attention")),
    ("cast", ("bfloat16_copy", "direct_copy", "copy_kernel", "float_copy")),
    ("mul", ("mul",)),
    ("add", ("add",)),
)
"""Kernel name fragments, first match wins; the rest is `other`."""


def kind(kernel: str) -> str:
    low = kernel.lower()
    return next((k for k, frags in KINDS if any(f in low for f in frags)), "other")


def adapt(model, rank: int, targets: str = DEFAULT_LORA_TARGETS):
    """train.py's adapters (training/model.add_adapters, its own code): rank `rank`, alpha 2 x rank, no dropout, on
    `targets` (train.py's --lora-targets: its default names, experts kept off, or all-linear). Returns the model with
    its adapters and the module names peft adapted."""
    from types import SimpleNamespace

    from training.model import add_adapters

    args = SimpleNamespace(method="lora", lora_r=rank, lora_alpha=2 * rank, lora_targets=targets)
    peft_model, _ = add_adapters(model, args, grad_checkpointing=False)
    adapted = {name.rsplit(".", 1)[-1] for name in peft_model.peft_config["default"].target_modules}
    return peft_model.base_model.model, sorted(adapted)


def measure(clock: Clock, cfg: dict, tokens: tuple[int, int], lora: bool, autocast: bool, rank: int, targets: str):
    """Per layer: forward + backward seconds and kernel seconds by kind, for one variant."""
    from torch.profiler import ProfilerActivity, profile
    from transformers import AutoModelForCausalLM

    cuda = clock.device == "cuda"
    seconds, kernels, adapted = {}, {}, []
    for depth in DEPTHS:
        config = layer_config(cfg, depth, not cuda)
        with torch.device(clock.device):
            model = AutoModelForCausalLM.from_config(
                config, dtype=clock.half, attn_implementation=attn_implementation(config, cuda)
            )
        model.requires_grad_(False)
        if lora:
            model, adapted = adapt(model, rank, targets)
        body = model.get_decoder().train()
        x = torch.randn(*tokens, config.hidden_size, device=clock.device, dtype=clock.half, requires_grad=True)
        grad = torch.randn_like(x)

        def both(body=body, x=x, grad=grad):
            with torch.autocast(clock.device, dtype=torch.bfloat16, enabled=autocast and cuda):
                y = body(inputs_embeds=x).last_hidden_state
            y.to(grad.dtype).backward(grad)
            body.zero_grad(set_to_none=True)

        seconds[depth] = (clock.time(both),)
        activities = [ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
        with profile(activities=activities) as prof:
            both()
            clock.sync()
        totals: collections.Counter = collections.Counter()
        for e in prof.events():
            if cuda and e.device_type == torch.autograd.DeviceType.CUDA:
                totals[kind(e.name)] += e.device_time_total * 1e-6
            elif not cuda and e.name.startswith("aten::"):
                totals[kind(e.name)] += e.self_cpu_time_total * 1e-6
        kernels[depth] = totals
        del model, body, x, grad
        if cuda:
            torch.cuda.empty_cache()
    span = DEPTHS[1] - DEPTHS[0]
    (step,) = per_layer(seconds[DEPTHS[0]], seconds[DEPTHS[1]], span)
    by_kind = {k: (kernels[DEPTHS[1]][k] - kernels[DEPTHS[0]][k]) / span for k in (*dict(KINDS), "other")}
    return step, by_kind, adapted


def compiled(clock: Clock, cfg: dict, tokens: tuple[int, int], lora: bool, fp8: bool, rank: int, targets: str) -> dict:
    """Per layer forward, forward + backward and checkpointed ms of one compiled variant, by the probe's timing."""
    adapted: list = []

    def adapters(model):
        model, names = adapt(model, rank, targets)
        adapted[:] = names
        return model

    seconds, _ = layer_seconds(clock, cfg, "frozen", tokens, True, fp8, adapters=adapters if lora else None)
    timed = {f"{k}_ms_per_layer": round(s * 1e3, 4) for k, s in zip(("fwd", "fwdbwd", "ckpt"), seconds, strict=True)}
    return {**timed, **({"lora_targets": adapted, "rank": rank} if lora else {})}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a preset or a local model directory / config.json")
    ap.add_argument("--tokens", action="append", required=True, help="MBxSEQ, e.g. 2x4096 (repeatable)")
    ap.add_argument("--rank", type=int, default=16, help="LoRA rank (train.py's default 16)")
    ap.add_argument("--lora-targets", default=DEFAULT_LORA_TARGETS, help="train.py's --lora-targets (or all-linear)")
    ap.add_argument("--budget-s", type=float, default=120.0, help="time box over all rows")
    ap.add_argument("--compiled", action="store_true", help="also the compiled and float8 rows, with and without "
                    "adapters (CUDA: float8 needs compute capability 8.9+)")  # fmt: skip
    ap.add_argument("--compiled-only", action="store_true", help="the compiled and float8 rows alone")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    cfg = hf_config_dict(args.model)
    if cfg is None:
        raise SystemExit(f"--model {args.model!r}: not a preset or a local model directory with config.json")
    clock = Clock.for_device("cuda" if torch.cuda.is_available() else "cpu")
    rows, t_end = [], time.monotonic() + args.budget_s
    for spec in args.tokens:
        tokens = tuple(int(n) for n in spec.lower().split("x"))
        for name, (lora, autocast) in ({} if args.compiled_only else VARIANTS).items():
            if clock.cut(f"{name} {spec}", t_end):
                continue
            try:
                step, by_kind, adapted = measure(clock, cfg, tokens, lora, autocast, args.rank, args.lora_targets)
            except Exception as exc:  # out of memory, an architecture this transformers cannot build
                clock.skip(f"{name} {spec}", exc)
                continue
            kernels = {k: round(v * 1e3, 4) for k, v in by_kind.items()}
            adapters = {"lora_targets": adapted, "rank": args.rank} if lora else {}
            row = {"variant": name, "mb": tokens[0], "seq": tokens[1], "fwdbwd_ms_per_layer": round(step * 1e3, 4)}
            rows.append({**row, "kernel_ms_per_layer": kernels, **adapters})
            print(json.dumps(rows[-1]), flush=True)
        for name, (lora, fp8) in COMPILED.items() if args.compiled or args.compiled_only else ():
            if clock.cut(f"{name} {spec}", t_end):
                continue
            try:
                timed = compiled(clock, cfg, tokens, lora, fp8, args.rank, args.lora_targets)
            except Exception as exc:  # out of memory, torchao missing, a card without float8
                clock.skip(f"{name} {spec}", exc)
                continue
            rows.append({"variant": name, "mb": tokens[0], "seq": tokens[1], **timed})
            print(json.dumps(rows[-1]), flush=True)
    import transformers

    doc = {"what": " ".join(__doc__.split("\n\n")[0].split()), "model": args.model, "lora_targets": args.lora_targets,
           "device": torch.cuda.get_device_name() if clock.device == "cuda" else "cpu",
           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
           "rows": rows, "skipped": clock.skipped}  # fmt: skip
    args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
