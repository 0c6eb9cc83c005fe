"""A dense model's own decoder layer timed whole as train.py runs it compiled: bf16 (`--compile-layers`) against
torchao's float8 Linears (`--precision fp8`), so a float8 row that misses can be split into what the layer costs and
what the estimator priced it at (its GEMM rows by shape, its casts at the table's rate).

Why: Phi at transformers' default config (2,048 wide, 64-wide heads, biases on every Linear) fully fine-tuned in
float8 at 2,048 x 8 ran 272 ms a step against 229 predicted (+18.6%), where its compiled bf16 twin ran 287 against
289; the table's float8 GEMM rows hold no K = 2,048 shape, and the estimator gives float8 a 1.64x GEMM speed-up there.

Each row: train.py's build of a random init (`from_config`, SDPA), at `--weights` fp32 (a full fine-tune's, under
bf16 autocast as train.py's DDP runs it) or bf16, every weight trained (`full`) or none (`frozen`, LoRA's base),
float8 where asked with train.py's own filter and config (training/precision.py), then each layer compiled in
place. Per layer from the difference of two depths (generator/probe/compute_layers.py does the same, at 1 and 3),
forward and forward + backward.

    python bench/scripts/fp8_layer_rows.py --model bench/models/phi-default.json --tokens 8x2048 --out rows.json
    python bench/scripts/fp8_layer_rows.py --model mistral-7b --tokens 2x4096 --weights fp32 --profile --out m.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from itertools import product
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from generator.probe.compute_bench import Clock, per_layer  # noqa: E402
from generator.probe.compute_layers import attn_implementation, hf_config_dict, layer_config  # noqa: E402
from training.precision import compile_layers, fp8_config, fp8_filter  # noqa: E402

DEPTHS = (2, 4)
"""train.py's compile finds the decoder layers as a repeated block list, which one layer is not."""


def kernels(fn, calls: int = 3, top: int = 40) -> list[dict]:
    """The kernels (GPU; host ops on the CPU) `fn` runs, by self time per call, from torch.profiler: which of a
    layer's costs (GEMMs, the float8 casts' amax and scaling kernels, inductor's fused pointwise ones) moved."""
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(calls):
            fn()
        if cuda:
            torch.cuda.synchronize()
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    rows = sorted(prof.key_averages(), key=lambda e: getattr(e, key, 0.0), reverse=True)[:top]
    return [{"name": e.key[:160], "ms_per_call": round(getattr(e, key, 0.0) / calls / 1e3, 4),
             "count_per_call": e.count / calls} for e in rows]  # fmt: skip


def layer_ms(
    clock: Clock, cfg: dict, tokens: tuple[int, int], weights, trained: bool, fp8: bool, profiled: bool = False
) -> dict:
    from transformers import AutoModelForCausalLM

    cuda = clock.device == "cuda"
    times, profile = {}, None
    for depth in DEPTHS:
        config = layer_config(cfg, depth, not cuda)
        with torch.device(clock.device):
            model = AutoModelForCausalLM.from_config(
                config, dtype=weights, attn_implementation=attn_implementation(config, cuda)
            )
        model.train().requires_grad_(trained)
        if fp8:
            from torchao.float8 import convert_to_float8_training

            convert_to_float8_training(model, config=fp8_config("tensorwise", False), module_filter_fn=fp8_filter)
        compile_layers(model)
        body = model.get_decoder()
        x = torch.randn(*tokens, config.hidden_size, device=clock.device, dtype=weights, requires_grad=True)
        grad = torch.randn_like(x)

        def forward(body=body, x=x):
            with torch.autocast(clock.device, dtype=torch.bfloat16):
                return body(inputs_embeds=x).last_hidden_state

        def both(forward=forward, grad=grad, body=body):
            forward().float().backward(grad.float())
            body.zero_grad(set_to_none=True)

        times[depth] = (clock.time(forward), clock.time(both))
        if profiled and depth == DEPTHS[-1]:
            profile = kernels(both)
        del model, body, x, grad
        if cuda:
            torch.cuda.empty_cache()
    fwd, fwdbwd = per_layer(times[DEPTHS[0]], times[DEPTHS[1]], DEPTHS[1] - DEPTHS[0])
    out = {"fwd_ms_per_layer": round(fwd * 1e3, 4), "fwdbwd_ms_per_layer": round(fwdbwd * 1e3, 4)}
    if profile is not None:
        out[f"kernels_at_{DEPTHS[-1]}_layers"] = profile
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a preset or a config.json-like file")
    ap.add_argument("--tokens", default="8x2048", help="micro-batch x sequence (default 8x2048)")
    ap.add_argument("--weights", default="fp32,bf16", help="weight dtypes: fp32 (full, trained), bf16 (frozen)")
    ap.add_argument("--budget-s", type=float, default=300.0)
    ap.add_argument("--profile", action="store_true", help="also each row's kernels by self time (torch.profiler)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    cfg = hf_config_dict(args.model)
    if cfg is None:
        raise SystemExit(f"--model {args.model!r}: not a preset or a config.json-like file")
    mb, seq = (int(v) for v in args.tokens.split("x"))
    clock = Clock("cuda" if torch.cuda.is_available() else "cpu")
    dtypes = {"fp32": (torch.float32, True), "bf16": (torch.bfloat16, False)}
    rows, t0 = [], time.monotonic()
    for name, fp8 in product(args.weights.split(","), (False, True)):
        if time.monotonic() - t0 > args.budget_s:
            clock.skipped.append(f"{name} fp8={fp8}: past the time box")
            continue
        weights, trained = dtypes[name]
        started = time.monotonic()
        try:
            ms = layer_ms(clock, cfg, (mb, seq), weights, trained, fp8, args.profile)
        except Exception as exc:  # out of memory, torchao missing, ...
            clock.skip(f"{name} fp8={fp8}", exc)
            continue
        rows.append({"weights": name, "variant": "full" if trained else "frozen", "fp8": fp8, "compiled": True,
                     "mb": mb, "seq": seq, **ms, "seconds": round(time.monotonic() - started, 1)})  # fmt: skip
        print({k: v for k, v in rows[-1].items() if not k.startswith("kernels")}, flush=True)
    import transformers

    doc = {"kind": "fp8-layer-rows", "script": "bench/scripts/fp8_layer_rows.py", "model": args.model,
           "device": torch.cuda.get_device_name() if clock.device == "cuda" else "cpu",
           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
           "rows": rows, "skipped": clock.skipped}  # fmt: skip
    args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
