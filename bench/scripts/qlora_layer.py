"""Whole-layer rows of train.py's QLoRA base (variant `qlora`), in the probe's layer-row format: a decoder layer as
train.py builds a QLoRA random init (training/qlora.py: the Linears in NF4, an MoE's experts split into per-expert
NF4 Linears by training/moe.py), after peft's prepare_model_for_kbit_training (fp32 norms and router, so the residual
stream is fp32), timed forward, forward + backward and forward + backward under train.py's non-reentrant
checkpointing, under train.py's bf16 autocast, input gradients only (the base is frozen; LoRA's adapters are priced
apart, as for the probe's `frozen` rows).

Why: an MoE QLoRA layer runs its experts in a Python loop (one host synchronisation per layer and, until train.py's
sorted dispatch of 2026-12-03, one per expert; bitsandbytes' dequantisation per expert and use); no operator row of
`probe --compute` prices that loop, and the dequantisation constant fitted on dense QLoRA rows carried it by accident
(bench/README.md, next calls). The rows are timed at two token counts so the estimator can separate the loop's fixed
cost from its per-token cost.

    python bench/scripts/qlora_layer.py --model mixtral-8x7b --tokens 1x2048 2x4096 --out qlora-layers.json

The probe (generator/) cannot build these layers itself: the per-expert NF4 split is train.py's (training/), which
the installed planner does not ship. `bench/fit_compute.py --supplement FILE` adds the rows to the shipped table.
"""

from __future__ import annotations

import argparse
import contextlib
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
    checkpointed,
    hf_config_dict,
    layer_config,
    layer_dims,
    layer_row,
)


def build(cfg: dict, layers: int, device: str):
    """The decoder body of a QLoRA random init as train.py builds it (training/model.py load_model, add_adapters'
    prepare_model_for_kbit_training), in train mode."""
    from peft import prepare_model_for_kbit_training

    from training.qlora import quantised_random_model, quantization_config

    config = layer_config(cfg, layers, device != "cuda")
    model = quantised_random_model(config, device, quantization_config(), attn_implementation="sdpa")
    model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    return config, model.get_decoder().train()


def timings(clock: Clock, body, config, tokens: tuple[int, int]) -> tuple[float, float, float]:
    """(forward, forward + backward, forward + backward checkpointed) seconds of the whole body on `tokens` =
    (micro-batch, sequence)."""
    dev = clock.device
    # the stream entering layer 1 is the fp32 embedding's output (prepare_model_for_kbit_training)
    x = torch.randn(*tokens, config.hidden_size, device=dev, dtype=torch.float32, requires_grad=True)
    grad = torch.randn_like(x)

    def forward():
        with torch.autocast(dev, dtype=torch.bfloat16):
            return body(inputs_embeds=x).last_hidden_state

    def both():
        forward().backward(grad)
        x.grad = None

    return clock.time(forward), clock.time(both), checkpointed(body, lambda: clock.time(both))


def rows(model: str, token_counts: list[tuple[int, int]], device: str, budget_s: float) -> tuple[list, list]:
    """Layer rows (variant qlora) per token count, and what the time box cut."""
    cfg = hf_config_dict(model)
    if cfg is None:
        raise SystemExit(f"--model {model!r}: not a preset or a local model directory with config.json")
    clock = Clock(device)
    t_end = time.monotonic() + budget_s
    measured: dict[tuple[int, int], dict[int, tuple[float, float]]] = {t: {} for t in token_counts}
    dims = {}
    for depth in DEPTHS:
        config, body = build(cfg, depth, device)
        dims = layer_dims(config)
        for tokens in token_counts:
            if time.monotonic() > t_end:
                clock.skipped.append(f"{model} depth {depth} {tokens}: time box")
                continue
            measured[tokens][depth] = timings(clock, body, config, tokens)
        del body
        if device == "cuda":
            torch.cuda.empty_cache()
    out = []
    for (mb, seq), by_depth in measured.items():
        if len(by_depth) < len(DEPTHS):
            continue
        seconds = per_layer(by_depth[DEPTHS[0]], by_depth[DEPTHS[1]], DEPTHS[1] - DEPTHS[0])
        out.append(layer_row(model, cfg["model_type"], dims, "qlora", (mb, seq), seconds))
    return out, clock.skipped


def _tokens(text: str) -> tuple[int, int]:
    mb, _, seq = text.partition("x")
    if not (mb.isdigit() and seq.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r}: expected MICROBATCHxSEQ, e.g. 2x4096")
    return int(mb), int(seq)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", required=True, help="a preset or a local model directory (repeatable)")
    ap.add_argument("--tokens", nargs="+", type=_tokens, default=[(1, 2048), (2, 4096)])
    ap.add_argument("--budget-s", type=float, default=120.0, help="time box per model")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        args.tokens = [(1, 16), (2, 32)]  # the plumbing only: widths are cut to a toy on CPU
    all_rows, skipped = [], []
    for model in args.model:
        r, s = rows(model, args.tokens, device, args.budget_s)
        all_rows += r
        skipped += s
        args.out.write_text(json.dumps(_document(device, all_rows, skipped), indent=1) + "\n")  # kept if cut later
    print(json.dumps(all_rows, indent=1))


def document_header(kind: str, script: str, device: str) -> dict:
    """What a results file of a bench script says of its run: kind, GPU, script, time and the versions (bitsandbytes'
    where installed: host_rows.py runs without it)."""
    from importlib.metadata import PackageNotFoundError, version

    import peft
    import transformers

    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    versions = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__}
    with contextlib.suppress(PackageNotFoundError):
        versions["bitsandbytes"] = version("bitsandbytes")
    return {"kind": kind, "device": name, "script": script,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "versions": versions}  # fmt: skip


def _document(device: str, layer_rows: list, skipped: list) -> dict:
    return {**document_header("qlora-layers", "bench/scripts/qlora_layer.py", device), "layers": layer_rows,
            "skipped": skipped}  # fmt: skip


if __name__ == "__main__":
    main()
