"""The estimator's GEMM FLOPs against what one training step of each causal-LM type executes, at the type's default
config widths: the planner's count (estimate.operators.gemm_flops) beside torch's FlopCounterMode over a forward and
backward of the model cut to a few layers (its first layers, enough to hold each kind its config's layer_types lists)
with a 512-token vocabulary and, for an MoE, four experts and top-2. A dense model runs on the meta device (shapes
only, nothing allocated); an MoE's routing reads values, so it runs on the CPU. Types that fail to build or run cut
this way are listed with their error, not guessed. CPU only, about ten minutes; tests/test_estimate_expert_flops.py
holds the same count for thirteen layouts as tests.

    python bench/scripts/flop_audit.py --out bench/results/cpu-flop-audit-<date>.json [TYPE ...]
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

SEQ = 32
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
TOP_K_KEYS = ("num_experts_per_tok", "num_experts_per_token", "moe_topk")
MAX_LAYERS = 8
CPU_PARAMS_LIMIT = 1.5e9
"""A cut larger than this is not run on the CPU (its fp32 weights, gradients and the step's copies would pass this
machine's memory): an MoE that large is listed as skipped, a dense model runs on meta only."""
GEMMS = ("mm", "addmm", "_grouped_mm")
BATCHED = ("bmm", "baddbmm")
"""Batched products: attention's scores on SDPA's math path, a selective scan, and the experts of the models that run
them as one bmm (Llama-4); reported apart."""


def cut_config(model_type: str) -> dict:
    """The default config of `model_type`, cut as the module docstring says."""
    from transformers import AutoConfig

    from generator.probe.compute_layers import CONFIG_DROPPED

    d = {k: v for k, v in AutoConfig.for_model(model_type).to_dict().items() if k not in CONFIG_DROPPED}
    d["layer_types"] = getattr(AutoConfig.for_model(model_type), "layer_types", None)
    n = d.get("num_hidden_layers")
    types = d.get("layer_types")
    keep = 2
    if isinstance(types, list) and types:
        keep = next((i for i in range(2, len(types) + 1) if set(types[:i]) == set(types)), len(types))
    keep = min(keep, MAX_LAYERS)
    for key, value in list(d.items()):  # per-layer lists and {layer: ...} maps, cut to the kept layers
        if isinstance(value, list) and n and len(value) == n:
            d[key] = value[:keep]
        elif isinstance(value, dict) and value and all(str(x).isdigit() for x in value):
            d[key] = {x: y for x, y in value.items() if int(x) < keep}
    if d.get("layer_types") is None:
        d.pop("layer_types")
    d.update(num_hidden_layers=keep, vocab_size=512)
    d.update(pad_token_id=0, bos_token_id=1, eos_token_id=2)  # inside the cut vocabulary
    if any(d.get(k) for k in EXPERT_KEYS):
        d.update({k: 4 for k in EXPERT_KEYS if d.get(k)})
        d.update({k: min(int(d[k]), 2) for k in TOP_K_KEYS if d.get(k)})
        d.update({k: 1 for k in ("n_group", "topk_group", "first_k_dense_replace") if d.get(k)})
    return d


def count_one(model_type: str, workdir: Path) -> dict:
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoConfig, AutoModelForCausalLM

    from generator.estimate.operators import gemm_flops
    from generator.estimate.types import Workload
    from generator.model import load_model

    config = AutoConfig.for_model(model_type, **cut_config(model_type))
    directory = workdir / model_type
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({**config.to_dict(), "model_type": model_type}, default=str))
    spec = load_model(str(directory), compiled=False)  # FLOPs only
    fwd, bwd = gemm_flops(spec, Workload(seq_len=SEQ, micro_batch=1, method="full"))
    config._attn_implementation = "sdpa" if "sdpa" in spec.attentions else "eager"
    moe = bool(spec.num_experts)
    small = spec.params_total <= CPU_PARAMS_LIMIT
    if moe and not small:
        raise ValueError(f"skipped: {spec.params_total / 1e9:.1f}B parameters cut, too large to run on the CPU")
    # a dense model on meta; on the CPU where its code reads a value (a mask's .item()) and it is small enough
    runs = [("meta", torch.float32)] * (not moe) + [("cpu", torch.float32), ("cpu", torch.bfloat16)] * small
    last = None
    for device, dtype in runs:
        try:
            with torch.device(device):
                model = AutoModelForCausalLM.from_config(config)
            model.to(dtype).train()
            ids = torch.randint(3, 500, (1, SEQ), device=device)
            counter = FlopCounterMode(display=False, custom_mapping={torch.ops.aten._grouped_mm: grouped_mm_flops})
            with counter:
                model(input_ids=ids, labels=ids).loss.backward()
            break
        except (RuntimeError, NotImplementedError) as exc:  # meta: a value read; CPU grouped_mm: bf16 operands only
            last = exc
    else:
        raise last
    counts = {str(op).split(".")[-1]: v for op, v in counter.get_flop_counts()["Global"].items()}
    gemm = sum(v for op, v in counts.items() if op in GEMMS)
    batched = sum(v for op, v in counts.items() if op in BATCHED)
    priced = fwd + bwd
    return {
        "layers": spec.num_layers, "moe": moe, "priced": priced, "gemm": gemm, "batched": batched,
        "priced_over_gemm": round(priced / gemm, 4) if gemm else None,
        "priced_over_gemm_and_batched": round(priced / (gemm + batched), 4),
    }  # fmt: skip


def grouped_mm_flops(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    """FlopCounterMode's formula for aten._grouped_mm, which the counter does not know: 2-D rows against 3-D
    per-group weights (forward, input gradient), or 2-D against 2-D grouped along the rows into a 3-D result (weight
    gradient); either way 2 x rows x in x out in all."""
    if len(b_shape) == 3:
        return 2 * a_shape[0] * a_shape[1] * b_shape[-1]
    return 2 * a_shape[0] * a_shape[1] * b_shape[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("types", nargs="*", help="model types (default: every causal-LM type the model-types file plans)")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import transformers

    planned = json.loads((REPO / "bench/results/cpu-model-types-2026-12-04.json").read_text())["results"]
    types = args.types or sorted(t for t, r in planned.items() if r["outcome"] in ("plan", "too-large"))
    results, start = {}, time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for model_type in types:
            t0 = time.time()
            try:
                results[model_type] = count_one(model_type, Path(tmp))
            except Exception as exc:  # a cut the type's config or code refuses: listed, not guessed
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
                results[model_type] = {"error": f"{type(exc).__name__}: {first}"}
            results[model_type]["seconds"] = round(time.time() - t0, 1)
            gc.collect()
            print(model_type, results[model_type], flush=True)
    counted = [r for r in results.values() if "error" not in r]
    exact = [r for r in counted if r["priced_over_gemm"] and abs(r["priced_over_gemm"] - 1) <= 0.005]
    doc = {
        "what": "GEMM FLOPs priced by the estimator over those one training step executes, each type's default "
        "config cut to a few layers (bench/scripts/flop_audit.py)",
        "date": time.strftime("%Y-%m-%d"), "transformers": transformers.__version__,
        "counts": {"types": len(results), "counted": len(counted), "within_0.5%": len(exact)},
        "seconds": round(time.time() - start, 1), "results": results,
    }  # fmt: skip
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"transformers {transformers.__version__}: {doc['counts']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
