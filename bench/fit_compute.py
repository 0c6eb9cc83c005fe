"""The shipped H200 operator-rate table (generator/compute/h200.json) and the constants fitted on top of it
(generator/compute/fit.json), made reproducibly.

    python bench/fit_compute.py bench/results/compute-h200-2026-12-03.json \
        --supplement bench/results/flex-short-docs-h200-2026-12-02.json \
        --supplement bench/results/flex-docs-in-rows-h200-2026-12-03.json \
        --supplement bench/results/qlora-layers-ckpt-h200-2026-12-03.json \
        --host bench/results/h200-x1-families-hostpaired-2026-12-03-b.json  # the measured table (probe --compute)
    python bench/fit_compute.py --provisional                                # catalog-scaled stand-in, no GPU
    python bench/fit_compute.py --check                                      # print the fit, write nothing
    python bench/fit_compute.py --refit                                      # refit on the shipped table: fit.json

Then regenerate REPORT.md (`python bench/report.py --no-plots`).

What is fitted (FITS, in order, each with the ones before it held; fit rows only, never bench/holdout.py's validation
rows; minimax on tokens/s; every row's error is printed and written beside the value): the operator model's own
elementwise_scale (estimate.compute_time: what counting the elementwise ops' bytes at the widening copy's rate misses,
launch gaps between small kernels, reductions below streaming bandwidth) on the single-GPU full fine-tunes in eager
bf16; then the terms of generator/estimate/step_traffic.py and timing.py that were fitted on residuals of the former
compute term, refitted on their own rows on top of the new one (LoRA adapter bytes, QLoRA dequantisation bytes,
DeepSpeed ZeRO-1/2 and ZeRO-3 overheads); last, on no step row, the compiled layers' adapter share, on compiled
decoder layers timed with and without train.py's adapters (bench/scripts/lora_layer_gap.py --compiled; minimax on the
adapters' price per layer, step_traffic.adapter_s, each on its own card).

The provisional table (until the measured one exists) spreads the estimator's former constants over the probe's
grid: GEMMs at PROVISIONAL_GEMM_EFFICIENCY of the catalog's dense bf16 peak (float8 x FP8_GEMM_SPEEDUP), attention at
the former per-path efficiencies, HBM at 0.8 of the catalog's bandwidth; it says so in the plan ("provisional").
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager
from datetime import datetime, timezone
from itertools import product
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.calibration import measured_busbw, placement  # noqa: E402
from bench.results_rows import RESULTS_DIR, load_files, load_rows  # noqa: E402
from generator.catalog.gpus import find_gpu  # noqa: E402
from generator.estimate import compute_source  # noqa: E402
from generator.estimate.compute_table import from_document  # noqa: E402
from generator.estimate.lora_targets import named_targets  # noqa: E402
from generator.estimate.scripts import ALL_LINEAR  # noqa: E402
from generator.model import load_model  # noqa: E402
from generator.probe import compute_grid as grid  # noqa: E402

SHIPPED, FIT = compute_source.SHIPPED, compute_source.FIT
# The former estimator's constants (generator/estimate/timing.py and precision.py before issue 26), used only to
# build the provisional table. GEMMs: 0.514 of peak was end to end (elementwise passes absorbed); the operator model
# prices those passes apart, so the GEMMs alone are put at 0.62 (an assumption between that and cuBLAS's large-shape
# rates on Hopper); the fit of ELEMENTWISE_SCALE below then carries the rest on the fit rows.
PROVISIONAL_GEMM_EFFICIENCY = 0.62
FP8_GEMM_SPEEDUP = 1.76
ATTENTION_EFFICIENCY = {"sdpa_dense": 0.29, "flex": 0.6, "sdpa_causal": 0.6}
HBM_EFFICIENCY = 0.8
FP32_TFLOPS = 67.0
"""H200 datasheet FP32 (no tensor cores: torch's default fp32 matmul precision), for the per-expert fp32 loop."""
CAST_BYTES, CAST_TRANSPOSE_BYTES = 5.0, 3.0
"""Former estimate/precision.py bytes per element: amax read + cast read/write; the transposed recast."""


def provisional_document() -> dict:
    part = find_gpu("NVIDIA H200")
    peak, hbm = part.dense_bf16_tflops, part.memory_tbps * 1e3 * HBM_EFFICIENCY
    models = grid.preset_models()
    gemms = grid.dense_grid(models, grid.CUDA_TOKENS) + grid.lora_grid(4096, grid.LORA_RANKS, grid.LORA_TOKENS)
    bf16 = peak * PROVISIONAL_GEMM_EFFICIENCY

    def row(g, tflops):
        return {"m": g.m, "k": g.k, "n": g.n, "op": g.op, "ms": g.flops / tflops / 1e9, "tflops": tflops}

    fp8 = [row(g, bf16 * FP8_GEMM_SPEEDUP) for g in gemms if not (g.m % 16 or g.k % 16 or g.n % 16)]
    grouped = []
    for e, k, a, b in [x for m in models for x in grid.model_experts(m)]:
        for impl, rate in (("grouped_mm", bf16), ("loop_bf16", bf16), ("loop_fp32", 0.7 * FP32_TFLOPS)):
            for op, (kk, nn) in (("fwd", (a, b)), ("dgrad", (b, a))):
                grouped.append({"impl": impl, "op": op, "experts": e, "top_k": k, "tokens": 8192, "k": kk, "n": nn,
                                "ms": 2 * 8192 * k * kk * nn / rate / 1e9, "tflops": rate})  # fmt: skip
    attention = []
    for path, eff in ATTENTION_EFFICIENCY.items():
        for heads, kv in grid.ATTN_LAYOUTS:
            for seq in grid.ATTN_SEQS:
                mb, keys = max(1, grid.ATTN_TOKENS // seq), (seq if path == "sdpa_dense" else seq / 2)
                f = 4.0 * mb * heads * 128 * seq * keys
                fwd_ms = f / (eff * peak) / 1e9
                attention.append({"path": path, "heads": heads, "kv_heads": kv, "head_dim": 128, "seq": seq, "mb": mb,
                                  "doc": seq, "keys_per_query": keys, "fwd_ms": fwd_ms, "fwdbwd_ms": 3 * fwd_ms,
                                  "fwd_tflops": eff * peak, "fwdbwd_tflops": eff * peak})  # fmt: skip
    casts = [{"kind": kind, "mode": mode, "rows": 32768, "cols": 4096, "ms": 0.0, "ns_per_elem": b / hbm,
              "gbps_3_bytes_per_elem": 3 * hbm / b} for kind, b in (("cast", CAST_BYTES),
              ("cast_transpose", CAST_TRANSPOSE_BYTES)) for mode in ("eager", "compiled")]  # fmt: skip
    return {
        "version": 1,
        "kind": "compute",
        "gpu": "NVIDIA H200",
        "device": "cuda",
        "measured": False,
        "provisional": "provisional H200 table from the GPU catalog and the former fitted efficiencies (GEMMs "
        f"{PROVISIONAL_GEMM_EFFICIENCY} of peak, fp8 x{FP8_GEMM_SPEEDUP}), not measured: bench/fit_compute.py",
        "model": None,
        "env": {},
        "method": {"measured_at": None, "built_by": "bench/fit_compute.py --provisional"},
        "units": {"ms": "milliseconds per call", "tflops": "1e12 FLOP/s", "gbps": "1e9 bytes/s"},
        "gemm": {"bf16": [row(g, bf16) for g in gemms], "fp8": fp8},
        "fp8_cast": casts,
        "grouped_gemm": grouped,
        "attention": attention,
        "hbm": [{"op": op, "bytes": 1, "ms": 0.0, "gbps": hbm} for op in ("copy_bf16", "cast_bf16_fp32")],
        "skipped": [],
    }


def _ok(r) -> bool:
    return r.role == "fit" and r.tps is not None and r.status == "ok" and r.script == "train.py" and not r.compiled


def full_rows(rows: list) -> list:
    """Single-GPU full fine-tunes under bf16 autocast in eager mode, SDPA or flex (no Liger, no compiled layers, no
    fp8): where the elementwise chain is the eager one the scale describes."""
    return [r for r in rows if _ok(r) and r.gpus == 1 and r.method == "full" and not (r.liger or r.compiled_layers)
            and r.precision == "bf16" and r.strategy in ("ddp", "fsdp")]  # fmt: skip


def lora_rows(rows: list) -> list:
    """LoRA under DDP, eager layers, bf16, no Liger (the compiled LoRA row fits compiled_adapter_fused). FSDP2's one
    LoRA row is left out: its error is FSDP2's own (predicted 18% slow where the same cell under DDP is 9% slow with
    no adapter bytes at all), and minimax on a set holding it pins the adapter bytes to zero."""
    return [r for r in rows if _ok(r) and r.method == "lora" and not (r.liger or r.compiled_layers)
            and r.precision == "bf16" and r.strategy == "ddp"]  # fmt: skip


def qlora_rows(rows: list) -> list:
    return [r for r in rows if _ok(r) and r.method == "qlora"]


def zero12_rows(rows: list) -> list:
    return [r for r in rows if _ok(r) and r.strategy in ("zero1", "zero2")]


def zero3_rows(rows: list) -> list:
    return [r for r in rows if _ok(r) and r.strategy == "zero3"]


def fp8_rows(rows: list) -> list:
    """train.py --precision fp8 (every decoder layer compiled, torchao's float8 Linears): where the float8 casts run
    inside compiled graphs, fused with their neighbours, not as the probe's standalone compiled cast."""
    return [r for r in rows if _ok(r) and r.precision == "fp8"]


FITS = (
    ("elementwise_scale", full_rows, 6.0),
    ("fp8_cast_scale", fp8_rows, 2.0),
    ("lora_bytes_per_token_width", lora_rows, 40.0),
    ("qlora_dequant_bytes_per_param", qlora_rows, 100.0),
    ("deepspeed_overhead_s_per_bparam", zero12_rows, 0.1),
    ("zero3_overhead_s_per_pass_per_bparam", zero3_rows, 0.1),
)
"""Fitted in this order, each with the ones before it held: (fit.json key, its rows, upper bound of the search). The
first is the operator model's own; the others were fitted on residuals of the former compute term
(generator/estimate/timing.py says which rows), so they are refitted on the same rows on top of the new one."""
ADAPTER_GAP_GLOB = "*-lora-layer-gap-*.json"
"""bench/scripts/lora_layer_gap.py --compiled files: one decoder layer compiled as train.py compiles it, bf16 and with
train.py's float8 Linears, timed with and without train.py's adapters by the probe's own timing."""
ADAPTER_PAIRS = (("compiled_row", "compiled_lora"), ("fp8_row", "fp8_lora"))


def adapter_gap_rows(results: Path = RESULTS_DIR) -> list[dict]:
    """What the adapters added to a compiled layer, per layer (ms), from each file's pairs of rows at one shape."""
    out = []
    for path in sorted(results.glob(ADAPTER_GAP_GLOB)):
        doc = json.loads(path.read_text())
        rows = {(r["variant"], r["mb"], r["seq"]): r for r in doc.get("rows", [])}
        for (plain, lora), (mb, seq) in product(ADAPTER_PAIRS, sorted({(mb, seq) for _, mb, seq in rows})):
            if (plain, mb, seq) not in rows or (lora, mb, seq) not in rows:
                continue
            ms = rows[(lora, mb, seq)]["fwdbwd_ms_per_layer"] - rows[(plain, mb, seq)]["fwdbwd_ms_per_layer"]
            out.append({"file": path.name, "model": doc["model"], "device": doc["device"], "mb": mb, "seq": seq,
                        "precision": "fp8" if plain.startswith("fp8") else "bf16",
                        "targets": doc.get("lora_targets"), "measured_ms": ms})  # fmt: skip
    return out


def _adapter_errors(gaps: list[dict], table, values: dict) -> dict[str, float]:
    """Row label -> error (%) of the step's adapter price (step_traffic.adapter_s, per layer, on the row's card: the
    table scaled by the catalog) against what the adapters added to the compiled layer."""
    from generator.estimate.compute_source import scaled_to
    from generator.estimate.step_traffic import adapter_s
    from generator.estimate.types import Workload

    out = {}
    with constants(values):
        for g in gaps:
            spec = load_model(g["model"] if not g["model"].startswith("bench/") else str(ROOT / g["model"]))
            # train.py's default names adapt only the llama names a model has (bench/row.py lora_by_name)
            targets = ALL_LINEAR if g["targets"] == "all-linear" else named_targets(spec, ALL_LINEAR)
            workload = Workload(method="lora", seq_len=g["seq"], micro_batch=g["mb"], precision=g["precision"],
                                grad_checkpointing=False, compiled_layers=True, load_dtype="bf16",
                                lora_targets=targets)  # fmt: skip
            priced = adapter_s(scaled_to(table, g["device"]), spec, workload) * 1e3 / spec.num_layers
            label = f"{g['file']}: {Path(g['model']).name.removesuffix('.json')} {g['precision']} {g['mb']}x{g['seq']}"
            out[label] = 100 * (priced / g["measured_ms"] - 1)
    return out


STEP_OBJECTIVE = "minimax |predicted/measured tokens/s - 1| over the rows"
ADAPTER_FUSED = "compiled_adapter_fused"
ADAPTER_OBJECTIVE = (
    "minimax |priced/measured adapters' ms per layer - 1| over compiled layers timed with and without train.py's "
    "adapters (bench/scripts/lora_layer_gap.py --compiled), each on its own card (the table scaled by the catalog)"
)


@contextmanager
def constants(values: dict):
    """The estimator reads these fitted constants (as fit.json would give them) inside the block."""
    saved = compute_source.fit_constants
    compute_source.fit_constants = lambda: {k: {"value": v} for k, v in values.items()}
    try:
        yield
    finally:
        compute_source.fit_constants = saved


def _errors(rows, busbw, table, values: dict) -> dict[str, float]:
    """Row label -> tokens/s error (%) with the fitted constants `values`."""
    from generator.estimate import estimate

    mistral = load_model("mistral-7b")
    out = {}
    with constants(values):
        for r in rows:
            model = getattr(r, "spec", None) or mistral
            e = estimate(model, r.workload, placement(r.gpus, busbw, r, table), r.strategy)
            out[f"{r.source}: {r.label}"] = 100 * (e.tokens_per_s_per_gpu / r.tps - 1)
    return out


def fit_constant(name: str, errors, hi: float) -> float:
    """Minimax of |errors(value)| over its rows for the constant `name` in [0, hi], `errors(value)` giving each row's
    error (%). Each row's error moves monotonically with the constant (a cost, or a share of one taken away), so the
    worst one is unimodal: golden-section search on the real estimates."""

    def worst(c):
        return max(abs(v) for v in errors(c).values())

    lo, top = 0.0, hi
    g = (5**0.5 - 1) / 2
    a, b = top - g * (top - lo), lo + g * (top - lo)
    fa, fb = worst(a), worst(b)
    for _ in range(60):
        if fa <= fb:
            top, b, fb = b, a, fa
            a = top - g * (top - lo)
            fa = worst(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (top - lo)
            fb = worst(b)
    return (lo + top) / 2


SUPPLEMENT_SHAPES = {
    "attention": ("path", "heads", "kv_heads", "seq", "doc"),
    "layers": (
        "hidden",
        "intermediate",
        "heads",
        "kv_heads",
        "experts",
        "top_k",
        "variant",
        "compiled",
        "precision",
        "mb",
        "seq",
    ),
}
"""What a supplement may add, and the fields that make two rows the same measurement (a row without `compiled`
predates compiled rows and is eager; one without `precision` is bf16)."""
GEMM_SHAPE = ("m", "k", "n", "op")
"""A supplement's GEMM rows (by dtype, as the probe writes them) are the same measurement at the same shape and op."""


def _shape(row: dict, fields: tuple[str, ...]) -> tuple:
    return tuple(bool(row.get(k)) if k == "compiled" else row.get(k) for k in fields)


def supplemented(doc: dict, path: Path) -> dict:
    """The table with a supplement's rows added, each naming its file: GEMM rows (`gemm` by dtype; the 1,024-token
    Linears and LoRA's pairs below 8,192 tokens, bench/scripts/small_gemms.py), attention rows (`rows`; flex at
    54-512-token documents, bench/results/flex-short-docs-h200-2026-12-02.json, which the 2026-12-02 probe did not
    time) and whole-layer rows (`layers`; train.py's QLoRA layers,
    bench/scripts/qlora_layer.py, which the probe cannot build; or a later `probe --compute --model` file's). Rows the
    table already holds at the same shape are left as the probe measured them, except a layer row that the table
    holds untimed under checkpointing and the supplement times (`ckpt_ms_per_layer`, added 2026-12-03): the whole row
    is taken from the supplement, so its three times come from one machine."""
    extra = json.loads(path.read_text())
    if "H200" not in str(extra.get("device")) + str(extra.get("gpu")):
        raise SystemExit(f"{path}: measured on {extra.get('device') or extra.get('gpu')!r}, not an H200")
    if not any(extra.get(k) for k in ("rows", "layers", "gemm")):
        raise SystemExit(f"{path}: no attention `rows`, `layers` or `gemm` rows to add")
    out = dict(doc)
    gemm = {dtype: list(rows) for dtype, rows in doc.get("gemm", {}).items()}
    for dtype, rows in (extra.get("gemm") or {}).items():  # bench/scripts/small_gemms.py: shapes the probe's grid lacks
        held = {_shape(r, GEMM_SHAPE) for r in gemm.setdefault(dtype, [])}
        gemm[dtype] += [{**r, "source": path.name} for r in rows if _shape(r, GEMM_SHAPE) not in held]
    out["gemm"] = gemm
    for section, shape in SUPPLEMENT_SHAPES.items():
        rows = extra.get("rows" if section == "attention" else section) or []
        timed = {_shape(r, shape) for r in rows if r.get("ckpt_ms_per_layer")}
        kept = [r for r in doc.get(section, []) if r.get("ckpt_ms_per_layer") or _shape(r, shape) not in timed]
        held = {_shape(r, shape) for r in kept}
        new = [{**r, "source": path.name} for r in rows if _shape(r, shape) not in held]
        out[section] = [*kept, *new]
    out["supplements"] = sorted({*doc.get("supplements", []), path.name})
    return out


def host_replaced(doc: dict, path: Path) -> dict:
    """The table with its host rows replaced by a later run of the probe's host section (a results file's `host`, on
    an H200 machine): the probe's host rows changed method on 2026-12-03 (four depths, interleaved rounds, warm calls;
    generator/probe/compute_host.py), and a results file holds two runs of it, which the table averages per key."""
    extra = json.loads(path.read_text())
    rows = extra.get("host") or []
    if not rows or not all(r.get("depths") for r in rows):
        raise SystemExit(f"{path}: no host rows of the current probe (four depths) in it")
    if "H200" not in str((extra.get("versions") or {}).get("gpu")):
        raise SystemExit(f"{path}: not measured on an H200")
    note = (
        f"'host' is not this probe run's: it holds the {len(rows)} host rows of {path.name} (the probe's host "
        "section as changed on 2026-12-03, run twice on one machine around host-bound cells), averaged per key."
    )
    notes = [n for n in doc.get("notes", []) if not n.startswith("'host' is not this probe run's")]
    host = [{**r, "source": path.name} for r in rows]
    return {**doc, "host": host, "host_source": path.name, "notes": [*notes, note]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("measured", nargs="?", help="probe --compute JSON measured on one H200")
    ap.add_argument("--provisional", action="store_true", help="build the catalog-scaled stand-in table")
    ap.add_argument("--check", action="store_true", help="print the fit against the shipped table; write nothing")
    ap.add_argument("--refit", action="store_true", help="refit on the shipped table as it is and write fit.json "
                    "alone (after an estimator change that moves no measured rate)")  # fmt: skip
    ap.add_argument("--supplement", action="append", default=[], type=Path,
                    help="a later measurement on one H200 of GEMM rows (its `gemm`), attention rows (its `rows`) or "
                    "whole-layer rows (its `layers`), added to the table with its "
                    "file named under `supplements` (repeatable)")  # fmt: skip
    ap.add_argument("--host", type=Path, default=None,
                    help="a results file whose `host` rows (a later run of the probe's host section on one H200)"
                    " replace the table's")  # fmt: skip
    args = ap.parse_args(argv)
    if args.measured:
        doc = json.loads(Path(args.measured).read_text())
        from_document(doc, "check")  # validates
        if "H200" not in str(doc.get("gpu")):
            raise SystemExit(f"{args.measured}: measured on {doc.get('gpu')!r}, not an H200")
    elif args.provisional:
        doc = provisional_document()
    elif args.check or args.refit:
        if args.refit and (args.supplement or args.host):
            ap.error("--refit fits the shipped table as it is: give the measured file to add --supplement or --host")
        doc = json.loads(SHIPPED.read_text())
    else:
        ap.error("give the measured file, --provisional, --check or --refit")
    for extra in args.supplement:
        doc = supplemented(doc, extra)
    if args.host:
        doc = host_replaced(doc, args.host)
    source = doc.get("provisional") or f"measured on one {doc['gpu']} by probe --compute"
    table = from_document(doc, source)
    files = load_files()
    rows, busbw = load_rows(files), measured_busbw(files)
    fit: dict = {}
    values: dict = {}

    def on_steps(chosen, held: dict) -> dict[str, float]:
        return _errors(chosen, busbw, table, held)

    def on_layers(chosen, held: dict) -> dict[str, float]:
        return _adapter_errors(chosen, table, held)

    fits = [(name, hi, select(rows), STEP_OBJECTIVE, on_steps) for name, select, hi in FITS]
    fits.append((ADAPTER_FUSED, 1.0, adapter_gap_rows(), ADAPTER_OBJECTIVE, on_layers))
    for name, hi, chosen, objective, errors_of in fits:
        if not chosen:
            print(f"{name}: no rows, left at the estimator's default")
            continue

        def errors_at(c: float, name=name, chosen=chosen, errors_of=errors_of) -> dict[str, float]:
            return errors_of(chosen, {**values, name: c})

        value = float(f"{fit_constant(name, errors_at, hi):.4g}")
        errors = errors_at(value)
        values[name] = value
        print(f"{name} = {value:.4g} (minimax on {len(chosen)} fit rows)")
        for label, err in sorted(errors.items()):
            print(f"  {err:+6.1f}%  {label}")
        fit[name] = {
            "value": value,
            "objective": objective,
            "rows": sorted(errors),
            "errors_pct": {k: round(v, 2) for k, v in sorted(errors.items())},
        }
    print(f"table: {source}")
    if args.check:
        return 0
    fit.update(table=source, fitted_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               by="bench/fit_compute.py")  # fmt: skip
    if not args.refit:
        SHIPPED.parent.mkdir(parents=True, exist_ok=True)
        SHIPPED.write_text(json.dumps(doc, indent=1) + "\n")
    FIT.write_text(json.dumps(fit, indent=1) + "\n")
    wrote = FIT.relative_to(ROOT) if args.refit else f"{SHIPPED.relative_to(ROOT)} and {FIT.relative_to(ROOT)}"
    print(f"wrote {wrote}; now: python bench/report.py --no-plots")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
