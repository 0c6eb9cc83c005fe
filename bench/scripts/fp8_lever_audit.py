"""Float8's price from the operators against the layer rows that timed it: for every pair of compiled layer rows in
bench/results/*-fp8-layer-rows-*.json (one model, weights and shape, bf16 and train.py's float8 Linears), the
measured difference per layer beside what the estimator's operators give the same layer (the decoder's own GEMMs
at the float8 rate table against bf16's, and torchao's casts at fp8_cast_scale), on the card the rows ran on (the
shipped H200 table, scaled by the catalog for another GPU). CPU only: it reads the rows and prices them.

A model with no float8 layer row of its own has its float8 lever priced this way (estimate.compute_time anchors it
on the bf16 row plus the operators' difference), so the gap per layer here is what such a model's float8 step
misses by.

    python bench/scripts/fp8_lever_audit.py --out bench/results/cpu-fp8-lever-audit-2026-12-07.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from generator.estimate import compute_time as ct  # noqa: E402
from generator.estimate import operators as ops  # noqa: E402
from generator.estimate.compute_source import table_for  # noqa: E402
from generator.estimate.types import Workload  # noqa: E402
from generator.model import load_model  # noqa: E402

RESULTS = REPO / "bench" / "results"


def priced_ms(model: str, gpu: str, variant: str, mb: int, seq: int) -> dict[str, float]:
    """The operators' float8-minus-bf16 per layer (ms), GEMMs and casts apart, for one compiled layer row's shape."""
    spec = load_model(model if not model.startswith("bench/") else str(REPO / model), compiled=True)
    table = table_for(gpu)
    full = variant == "full"
    method, load = ("full", "fp32") if full else ("lora", "bf16")
    out = {}
    for precision in ("bf16", "fp8"):
        workload = Workload(method=method, seq_len=seq, micro_batch=mb, precision=precision, grad_checkpointing=False,
                            compiled_layers=True, load_dtype=load)  # fmt: skip
        out[precision] = (ct.gemms_s(table, spec, workload, ops.is_decoder_base), ct.fp8_casts_s(table, spec, workload))
    per_layer = 1e3 / spec.num_layers
    gemm = (out["fp8"][0] - out["bf16"][0]) * per_layer
    cast = (out["fp8"][1] - out["bf16"][1]) * per_layer
    return {"gemm_ms": round(gemm, 3), "cast_ms": round(cast, 3), "total_ms": round(gemm + cast, 3),
            "bf16_gemm_ms": round(out["bf16"][0] * per_layer, 3)}  # fmt: skip


def pairs(path: Path) -> list[dict]:
    doc = json.loads(path.read_text())
    rows = doc.get("rows", [])
    out = []
    shape = ("weights", "variant", "mb", "seq")
    for f8 in (r for r in rows if r.get("fp8")):
        same = (r for r in rows if not r.get("fp8") and all(r.get(k) == f8.get(k) for k in shape))
        bf = next(same, None)
        if bf is None:
            continue
        measured = f8["fwdbwd_ms_per_layer"] - bf["fwdbwd_ms_per_layer"]
        priced = priced_ms(doc["model"], doc["device"], f8["variant"], f8["mb"], f8["seq"])
        out.append({"file": path.name, "model": doc["model"], "device": doc["device"], "variant": f8["variant"],
                    "weights": f8["weights"], "mb": f8["mb"], "seq": f8["seq"],
                    "bf16_ms": bf["fwdbwd_ms_per_layer"], "fp8_ms": f8["fwdbwd_ms_per_layer"],
                    "measured_ms": round(measured, 3), "priced": priced,
                    "priced_minus_measured_ms": round(priced["total_ms"] - measured, 3)})  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    rows = [p for path in sorted(RESULTS.glob("*-fp8-layer-rows-*.json")) for p in pairs(path)]
    doc = {"what": " ".join(__doc__.split("\n\n")[0].split()), "script": "bench/scripts/fp8_lever_audit.py",
           "rows": rows}  # fmt: skip
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    for r in rows:
        p = r["priced"]
        print(f"{r['model'].split('/')[-1][:24]:24} {r['device'][-9:]:9} {r['variant']:6} {r['mb']}x{r['seq']}: "
              f"measured {r['measured_ms']:+.2f} ms ({r['fp8_ms'] / r['bf16_ms']:.3f}x), priced {p['total_ms']:+.2f} "
              f"(GEMMs {p['gemm_ms']:+.2f}, casts {p['cast_ms']:+.2f})")  # fmt: skip


if __name__ == "__main__":
    main()
