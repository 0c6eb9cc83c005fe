"""A dense model's own decoder layer timed whole as train.py runs it compiled: bf16 (`--compile-layers`) against
torchao's float8 Linears (`--precision fp8`), so a float8 row that misses can be split into what the layer costs and
what the estimator priced it at (its GEMM rows by shape, its casts at the table's rate).

Why: Phi at transformers' default config (2,048 wide, 64-wide heads, biases on every Linear) fully fine-tuned in
float8 at 2,048 x 8 ran 272 ms a step against 229 predicted (+18.6%), where its compiled bf16 twin ran 287 against
289; the table's float8 GEMM rows hold no K = 2,048 shape, and the estimator gives float8 a 1.64x GEMM speed-up there.

Each row: train.py's build of a random init (`from_config`, SDPA), at `--weights` fp32 (a full fine-tune's, under
bf16 autocast as train.py's DDP runs it) or bf16, every weight trained (`full`) or none (`frozen`, LoRA's base),
float8 where asked as train.py converts it (model.compiled_count.to_float8: train.py's filter and torchao's tensorwise
config, training/precision.py), then each layer compiled in place. Timed by the probe's own code
(generator/probe/compute_layers.layer_seconds, which `probe --compute --full --model` runs for the float8 rows the
estimate reads): per layer from the difference of depths 1 and 3, forward, forward + backward and checkpointed.
Files before 2026-12-06's eighteenth session ran depths 2 and 4 with their own copy of that code.

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

from generator.probe.clock import Clock  # noqa: E402
from generator.probe.compute_layers import (  # noqa: E402
    DEPTHS,
    hf_config_dict,
    layer_row,
    layer_seconds,
    weights_dtype,
)


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
) -> tuple[dict, tuple, dict]:
    """One row, its seconds and the widths keying it: the probe's own timing (compute_layers.layer_seconds),
    compiled, at `weights`."""
    profile: list = []
    inspect = (lambda both: profile.extend(kernels(both))) if profiled else None
    variant = "full" if trained else "frozen"
    seconds, dims = layer_seconds(clock, cfg, variant, tokens, True, fp8, weights, inspect)
    out = {f"{k}_ms_per_layer": round(s * 1e3, 4) for k, s in zip(("fwd", "fwdbwd", "ckpt"), seconds, strict=True)}
    if profiled:
        out[f"kernels_at_{DEPTHS[-1]}_layers"] = profile
    return out, seconds, dims


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a preset or a config.json-like file")
    ap.add_argument("--tokens", default="8x2048", help="micro-batch x sequence (default 8x2048)")
    ap.add_argument("--weights", default="fp32,bf16", help="weight dtypes: fp32 (full, trained), bf16 (frozen)")
    ap.add_argument("--budget-s", type=float, default=300.0)
    ap.add_argument("--profile", action="store_true", help="also each row's kernels by self time (torch.profiler)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--layers-out", type=Path, help="also the float8 rows at train.py's weights as the probe writes "
                    "them (`layers`), for bench/fit_compute.py --supplement")  # fmt: skip
    args = ap.parse_args(argv)
    cfg = hf_config_dict(args.model)
    if cfg is None:
        raise SystemExit(f"--model {args.model!r}: not a preset or a config.json-like file")
    mb, seq = (int(v) for v in args.tokens.split("x"))
    clock = Clock("cuda" if torch.cuda.is_available() else "cpu")
    dtypes = {"fp32": (torch.float32, True), "bf16": (torch.bfloat16, False)}
    rows, layers, t0 = [], [], time.monotonic()
    for name, fp8 in product(args.weights.split(","), (False, True)):
        if time.monotonic() - t0 > args.budget_s:
            clock.skipped.append(f"{name} fp8={fp8}: past the time box")
            continue
        weights, trained = dtypes[name]
        started = time.monotonic()
        try:
            ms, seconds, dims = layer_ms(clock, cfg, (mb, seq), weights, trained, fp8, args.profile)
        except Exception as exc:  # out of memory, torchao missing, ...
            clock.skip(f"{name} fp8={fp8}", exc)
            continue
        variant = "full" if trained else "frozen"
        if fp8 and weights == weights_dtype(variant, fp8):  # the float8 rows the estimate reads
            layers.append(layer_row(args.model, cfg["model_type"], dims, variant, (mb, seq), seconds, True, fp8))
        rows.append({"weights": name, "variant": variant, "fp8": fp8, "compiled": True,
                     "mb": mb, "seq": seq, **ms, "seconds": round(time.monotonic() - started, 1)})  # fmt: skip
        print({k: v for k, v in rows[-1].items() if not k.startswith("kernels")}, flush=True)
    import transformers

    doc = {"kind": "fp8-layer-rows", "script": "bench/scripts/fp8_layer_rows.py", "model": args.model,
           "device": torch.cuda.get_device_name() if clock.device == "cuda" else "cpu",
           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
           "rows": rows, "skipped": clock.skipped}  # fmt: skip
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    if args.layers_out:
        keep = ("kind", "script", "model", "device", "measured_at", "versions", "skipped")
        args.layers_out.write_text(json.dumps({**{k: doc[k] for k in keep}, "layers": layers}, indent=1) + "\n")


if __name__ == "__main__":
    main()
