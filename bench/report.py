"""Regenerate bench/REPORT.md (and its PNG plots) from bench/results/: every measured row beside the CURRENT
estimator's prediction, the planner's pick against the fastest measured configuration, and the calibration targets.

    python bench/report.py            # write REPORT.md and the PNGs
    python bench/report.py --check    # exit 1 if REPORT.md is out of date (no files written)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
if str(BENCH.parent) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(BENCH.parent))

from bench import family_report, fp8_curves, meta_seed, other_cards  # noqa: E402
from bench.calibration import error_pct, measured_busbw, predict  # noqa: E402
from bench.holdout import OTHER_CODE  # noqa: E402
from bench.recommend import verdicts  # noqa: E402
from bench.results_rows import RESULTS_DIR, load_files, load_rows  # noqa: E402
from bench.targets import WHY_VALIDATION_MISSED, explain, judge, judge_validation  # noqa: E402
from bench.wires import busbw_by_wire  # noqa: E402

REPORT = BENCH / "REPORT.md"
IN_SAMPLE = (
    "Caveat: the estimator's calibrated terms (FRAGMENTATION in generator/estimate/core.py; the overheads and "
    "allocator terms in generator/estimate/timing.py, the LoRA/QLoRA terms in step_traffic.py; the elementwise scale "
    "and LoRA adapter bytes in generator/compute/fit.json, fitted by bench/fit_compute.py on top of the measured "
    "operator rates) were fitted to rows of this report, most to several rows (QLoRA's two rest on its one run), so "
    "'met' is partly in-sample. GEMM, attention, cast and HBM rates are measured by probe --compute, not fitted. The "
    "other memory terms are derived from what the frameworks allocate, and the measured rows check them. Rows at "
    "other sequence lengths, GPU counts, GPUs and models are predictions the matrix has not yet checked."
)
PATH_NAMES = {"nvlink": "NVLink", "p2p_disabled": "P2P disabled", "sockets": "sockets"}
PLOTS = {
    "memory": "report-memory.png",
    "bandwidth": "report-bandwidth.png",
    "throughput": "report-throughput.png",
    "fp8_curves": "report-fp8-curves.png",
}


def _superseded_row(r, e) -> list[str]:
    """A row measured again after a fix: what it read then, beside what the estimator now predicts."""
    tps = "-" if r.tps is None else f"{r.tps:.0f}"
    return [r.label, r.source, _f(r.alloc_gb), _f(e.peak_gb), _f(r.reserved_gb), _f(e.reserved_gb), tps,
            f"{e.tokens_per_s_per_gpu:.0f}"]  # fmt: skip


def _other_code_row(r, e) -> list[str]:
    """A row its model's installed code no longer runs as it ran: measured, predicted when it ran (under its own
    versions) and by the estimator now (under the installed ones)."""
    alloc, tps = r.ran_predicted or (None, None)
    return [r.label, r.source, r.transformers or "-", _f(r.alloc_gb), _beside(alloc, r.alloc_gb, "{:.2f}"),
            _f(e.peak_gb), _f(r.tps, "{:.0f}"), _beside(tps, r.tps, "{:.0f}"),
            f"{e.tokens_per_s_per_gpu:.0f}"]  # fmt: skip


def _beside(predicted: float | None, measured: float | None, fmt: str) -> str:
    """A prediction with its error against the measurement beside it."""
    if predicted is None or measured is None:
        return "-"
    return f"{fmt.format(predicted)} ({_pct(error_pct(predicted, measured))})"


def _f(x: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1f}%"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head), *("| " + " | ".join(r) + " |" for r in rows)]


def _plot_label(r) -> str:
    """Matrix rows may repeat the settings of an older measurement: name the run."""
    return f"{r.label} ({r.machine})" if r.from_matrix else r.label


OTHER_CODE_NOTE = (
    "Rows whose model's code differs between the transformers they ran under (the GPU image's) and the one the "
    "estimate counts where this report is rendered, read in both versions' sources (bench/holdout.py OTHER_CODE): "
    "shown beside what the estimator predicted when they ran, under their own versions, and unscored until they run "
    "under the installed one:"
)
VALIDATION_NOTE = (
    "Rows of the single-GPU sweep (`bench/sweep.py`) named in `bench/holdout.py`'s VALIDATION_KEYS before any "
    "term was fitted to the sweep, and every row of the scripts people launch (`custom`: a plain Accelerate loop; "
    "`trainer`: TRL's SFTTrainer), whose terms come from the libraries' sources (docs/scripts.md). Grouped by script. "
    "One change came after a validation row missed (the plain loop's LoRA run without checkpointing, -5.9%): the "
    "activation terms for what peft and SDPA save (LoRA's bf16 copies of adapted inputs, k/v repeated under a mask, "
    "o_proj's input shared with SDPA's output). Their sizes come from a CPU count of saved tensors on a tiny model "
    "(tests/test_estimate_lora_saved.py), not from the row; that row now reads -0.3%."
)


def validation_tables(mem: list, tput: list) -> list[str]:
    """One table per script: memory and tokens/s of each held-out row beside the prediction."""
    speed = {r: (e, et) for r, e, et in tput}
    out = []
    for script in sorted({r.script for r, *_ in mem} | {r.script for r in speed}):
        rows = [m for m in mem if m[0].script == script]
        out += ["", f"### {script}", ""]
        head = ["row", "alloc measured", "predicted", "error", "reserved measured", "predicted", "error"]
        body = []
        for r, e, ea, er in rows:
            es, et = speed.get(r, (None, None))
            tps = [_f(r.tps, "{:.0f}"), _f(es.tokens_per_s_per_gpu if es else None, "{:.0f}"), _pct(et)]
            cells = [_f(r.alloc_gb), _f(e.peak_gb), _pct(ea), _f(r.reserved_gb), _f(e.reserved_gb), _pct(er)]
            body.append([r.label, *cells, *tps])
        out += _table([*head, "tokens/s measured", "predicted", "error"], body)
    return out


def bandwidth_curves(files: dict[str, dict]) -> list[tuple[str, dict[str, float]]]:
    curves = []
    for name, data in sorted(files.items()):
        for path, key in (("NVLink", "subsets"), ("P2P disabled", "p2p_disabled")):
            for subset, value in sorted((data.get(key) or {}).items()):
                for coll in ("all_reduce", "all_gather", "reduce_scatter"):
                    pts = {s: v[coll] for s, v in (value.get("sizes") or {}).items() if coll in v}
                    if len(pts) > 2:
                        curves.append((f"GPUs {subset} {path} {coll} ({name})", pts))
        for path, value in sorted(((data.get("bandwidth") or {}).get("paths") or {}).items()):
            subset, path_name = data["bandwidth"].get("subset", "?"), PATH_NAMES.get(path, path)
            curves.append((f"GPUs {subset} {path_name} all_reduce ({name})", value["busbw_gbps"]))
    return curves


def _records(data: dict) -> str:
    """A source line for a file that does not say what it is: calibration records, or a `probe --compute` table."""
    n = len(data.get("measurements") or [])
    if n:
        return f"plan --trial calibration records ({n} measurements: reserved memory and tokens/s)"
    method = data.get("method") if isinstance(data.get("method"), dict) else {}
    if data.get("kind") == "compute" and method:
        flags = (" --quick" if method.get("quick") else "") + (f" --model {data['model']}" if data.get("model") else "")
        took = f", {method['seconds']:.0f} s" if method.get("seconds") else ""
        return f"`probe --compute{flags}` on one {data.get('gpu')}, {method.get('measured_at', 'undated')}{took}"
    return ""


def fp8_curves_section(files: dict[str, dict]) -> tuple[list[str], list]:
    """REPORT.md's issue-20 section and its figure's panels, from every results file holding 200-step fp8/bf16 twins;
    nothing when none does."""
    md, panels = [], []
    for name, data in sorted(files.items()):
        comps = fp8_curves.comparisons(data)
        if not comps:
            continue
        v, cells = data.get("versions") or {}, data["cells"]
        b = cells[comps[0].bf16_key]
        md += [
            f"`{name}` (per-step logs in `{name.removesuffix('.json')}-logs.tgz`), measured on "
            f"{v.get('gpu_count', '?')}x {v.get('gpu', '?')}, torch {v.get('torch')}, torchao {v.get('torchao')}, "
            f"transformers {v.get('transformers')}, liger-kernel {v.get('liger-kernel')}: {b['steps']} steps of "
            f"train.py on Mistral-7B's architecture with random weights, seq {b['seq_len']}, micro-batch "
            f"{b['micro_batch']}, checkpointing {'on' if b['ckpt'] else 'off'}, {b['attention']} attention, "
            f"{'Liger, ' if b['liger'] else ''}the synthetic {b['docs']} packed data (`{b['dataset']}`), the same seed "
            "and data order in both precisions. Rows: "
            + "; ".join(f"{c.method}: `{c.bf16_key}` (bf16) vs `{c.fp8_key}` (fp8)" for c in comps)
            + ".",
            "",
        ]
        md += _table(*fp8_curves.table(comps))
        md += ["", *map(fp8_curves.reading, comps), ""]
        yard = fp8_curves.yardsticks(data)
        if yard:
            md += [
                "The same windows on two bf16 runs, the second from seed 1 (another init and data order: "
                + ", ".join(f"`{b.fp8_key}`" for _, b in yard)
                + "): how far bf16 drifts from itself, next to fp8's gap.",
                "",
                *_table(*fp8_curves.yardstick_table(yard)),
                "",
            ]
        panels += [
            (
                f"{c.method} ({name})",
                {
                    p: (cells[k]["measured"]["losses"], cells[k]["measured"].get("grad_norms") or [])
                    for p, k in (("bf16", c.bf16_key), ("fp8", c.fp8_key))
                },
            )
            for c in comps
        ]
    if not md:
        return [], []
    head = ["", "## Float8 loss and gradient-norm curves", "", f"![fp8 curves]({PLOTS['fp8_curves']})", ""]
    tail = [
        "Both precisions memorise the synthetic data (1000 templated examples of ~54 tokens: 200 steps of 2048 tokens "
        "pass over them 7 to 8 times), so the later windows measure how fast each run memorises, not how well it "
        "generalises; each verdict rests on one fp8 run, and the second bf16 run is the only measure of run-to-run "
        "drift. "
        "Computed by `python bench/fp8_curves.py` (`--json` for the numbers).",
    ]
    return [*head, *fp8_curves.criteria(), "", *md, *tail], panels


def build(files: dict[str, dict]) -> tuple[str, dict]:
    """(markdown, data for the plots)."""
    rows, busbw, wires = load_rows(files), measured_busbw(files), busbw_by_wire(files)
    mem, tput, failed = [], [], []
    for r in sorted(rows, key=lambda r: (r.gpus, r.strategy, r.label, r.source)):
        e = predict(r, busbw, wires)
        if r.status != "ok":
            status = r.status + (" (measured again after a fix)" if r.role == "superseded" else "")
            failed.append([r.label, r.source, status, f"{e.reserved_gb:.2f}", f"{e.capacity_gb:.2f}", str(e.fits)])
        if r.alloc_gb is not None or r.reserved_gb is not None:
            ea = error_pct(e.peak_gb, r.alloc_gb) if r.alloc_gb is not None else None
            mem.append((r, e, ea, r.reserved_gb and error_pct(e.reserved_gb, r.reserved_gb)))
        if r.tps is not None:
            tput.append((r, e, error_pct(e.tokens_per_s_per_gpu, r.tps)))
    recs = verdicts(rows, busbw, wires)
    held_mem, held_tput = [m for m in mem if m[0].role == "validation"], [t for t in tput if t[0].role == "validation"]
    old = [m for m in mem if m[0].role == "superseded"]
    other = [m for m in mem if m[0].role == "other-code"]
    mem, tput = [m for m in mem if m[0].role == "fit"], [t for t in tput if t[0].role == "fit"]
    results = judge([m for m in mem if not m[0].unmodelled], [t for t in tput if not t[0].unmodelled], recs)
    held = judge_validation(held_mem, held_tput)
    # The planner's usable memory for the multi-GPU rows (context and NCCL buffers outside the allocator).
    capacity = max((e.capacity_gb for _, e, _, _ in mem), default=0.0)
    md = [
        "# Calibration report",
        "",
        "Generated by `python bench/report.py` from `bench/results/`; do not edit by hand.",
        "Predicted = the current estimator (`generator.estimate.estimate`) for each row's settings on NVIDIA H200 "
        f"(150.75 GB); bus bandwidth for 2 GPUs {_f(busbw.get(2), '{:.1f}')} GB/s (measured probe), none for 1 GPU.",
        "",
        "## Targets",
        "",
    ]
    md += _table(["target", "rows", "result", "worst"], [[t.name, str(t.rows), t.result, t.worst] for t in results])
    md += ["", *(line for t in results if t.result == "missed" for line in explain(t))]
    if any(r.unmodelled for r, *_ in mem):
        md += ["- Rows labelled compile use a lever the estimator does not model: shown, unscored."]
    md += ["", IN_SAMPLE]
    md += ["", "## Validation rows (held out: never used to fit any term)", ""]
    md += [VALIDATION_NOTE, ""]
    md += _table(["target", "rows", "result", "worst"], [[t.name, str(t.rows), t.result, t.worst] for t in held])
    md += ["", *(line for t in held if t.result == "missed" for line in explain(t, WHY_VALIDATION_MISSED))]
    md += validation_tables(held_mem, held_tput)
    md += family_report.section(held_mem, held_tput, _table)
    md += other_cards.section(files, _table)
    if old:
        md += ["", "Rows measured again after a fix (the later file's `supersedes`), shown, unscored:", ""]
        head = ["row", "source", "alloc measured", "predicted", "reserved measured", "predicted", "tokens/s",
                "predicted"]  # fmt: skip
        md += _table(head, [_superseded_row(r, e) for r, e, *_ in old])
    if other:
        md += ["", OTHER_CODE_NOTE, ""]
        md += [f"- {model}: {why}." for model, (_, why) in sorted(OTHER_CODE.items())] + [""]
        head = ["row", "source", "transformers", "alloc measured", "predicted then", "now", "tokens/s",
                "predicted then", "now"]  # fmt: skip
        md += _table(head, [_other_code_row(r, e) for r, e, *_ in other])
    md += ["", "## Peak memory per GPU (GB)", "", f"![peak memory]({PLOTS['memory']})", ""]
    md += _table(
        [
            "row",
            "source",
            "alloc measured",
            "alloc predicted",
            "error",
            "reserved measured",
            "reserved predicted",
            "error",
        ],
        [
            [r.label, r.source, _f(r.alloc_gb), _f(e.peak_gb), _pct(ea), _f(r.reserved_gb), _f(e.reserved_gb), _pct(er)]
            for r, e, ea, er in mem
        ],
    )
    if failed:
        md += ["", "Matrix cells that did not run:", ""]
        md += _table(["row", "source", "status", "reserved predicted", "usable", "predicted fits"], failed)
    md += ["", "## Throughput (tokens/s per GPU)", "", f"![throughput]({PLOTS['throughput']})", ""]
    md += _table(
        ["row", "source", "measured", "predicted", "error"],
        [[r.label, r.source, _f(r.tps, "{:.0f}"), _f(e.tokens_per_s_per_gpu, "{:.0f}"), _pct(et)] for r, e, et in tput],
    )
    md += ["", "## Recommendation vs fastest measured", ""]
    md += [
        "Fastest that fits: the fastest cell of the group whose measured peak reserved memory stayed within the "
        "planner's usable memory (the card less the default 10% headroom and the memory outside the allocator). "
        "Rows run with Liger or flex attention are their own groups (user flags, not planner choices); torch.compile "
        "rows are left out (the generator does not emit it, and the estimator does not model it).",
        "",
    ]
    if recs:
        md += _table(
            ["machine / workload", "planner picks", "measured tokens/s", "fastest that fits", "tokens/s", "regret"],
            [
                [
                    v.group,
                    v.recommended,
                    _f(v.recommended_tps, "{:.0f}"),
                    v.fastest,
                    _f(v.fastest_tps, "{:.0f}"),
                    _pct(v.regret_pct),
                ]
                for v in recs
            ],
        )
    else:
        md += ["No benchmark-matrix results (`bench/run_matrix.py`) yet: nothing to rank."]
    curves = bandwidth_curves(files)
    md += ["", "## Bus bandwidth (GB/s)", "", f"![bus bandwidth]({PLOTS['bandwidth']})", ""]
    sizes = ["1M", "16M", "256M", "1G", "2G"]
    md += _table(["curve", *sizes], [[label, *(_f(pts.get(s), "{:.1f}") for s in sizes)] for label, pts in curves])
    fp8_md, fp8_panels = fp8_curves_section(files)
    md += fp8_md
    md += ["", "## Sources", ""]
    md += [
        f"- `{name}`: {d.get('what') or d.get('source') or d.get('machine') or _records(d)}"
        for name, d in sorted(files.items())
    ]
    plots = {
        "memory": [(_plot_label(r), r.alloc_gb, e.peak_gb, r.reserved_gb, e.reserved_gb) for r, e, _, _ in mem],
        "throughput": [(_plot_label(r), r.tps, e.tokens_per_s_per_gpu) for r, e, _ in tput],
        "bandwidth": curves,
        "capacity": capacity,
        "fp8_curves": fp8_panels,
    }
    return "\n".join(md) + "\n", plots


def draw(plots: dict, out: Path) -> None:
    from bench.plots import bandwidth_plot, fp8_curves_plot, memory_plot, throughput_plot

    memory_plot(plots["memory"], plots["capacity"], out / PLOTS["memory"])
    bandwidth_plot(plots["bandwidth"], out / PLOTS["bandwidth"])
    throughput_plot(plots["throughput"], out / PLOTS["throughput"])
    if plots["fp8_curves"]:
        fp8_curves_plot(plots["fp8_curves"], out / PLOTS["fp8_curves"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 if REPORT.md would change; write nothing")
    ap.add_argument("--no-plots", action="store_true", help="write REPORT.md only")
    ap.add_argument("--results", type=Path, default=RESULTS_DIR)
    args = ap.parse_args(argv)
    files = load_files(args.results)
    text, plots = build(files)
    if args.check:
        current = REPORT.read_text() if REPORT.exists() else ""
        if current != text:
            print("bench/REPORT.md is out of date: run python bench/report.py", file=sys.stderr)
            return 1
        return 0
    REPORT.write_text(text)
    meta_seed.refresh(row.config for row in load_rows(files))
    if not args.no_plots:
        draw(plots, BENCH)
    print(f"wrote {REPORT}" + ("" if args.no_plots else f" and {len(PLOTS)} plots"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
