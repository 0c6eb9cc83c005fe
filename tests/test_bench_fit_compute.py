"""bench/fit_compute.py reproduces generator/compute/fit.json from the shipped table and the committed rows, and
fits only on fit rows."""

import json

from bench import fit_compute
from bench.results_rows import load_files, load_rows
from generator.estimate.compute_source import FIT


def test_the_committed_fit_is_what_the_script_fits(capsys):
    assert fit_compute.main(["--check"]) == 0
    out = capsys.readouterr().out
    fit = json.loads(FIT.read_text())
    for name in [*(name for name, _, _ in fit_compute.FITS), fit_compute.ADAPTER_FUSED]:
        if name in fit:
            assert f"{name} = {fit[name]['value']:.4g} " in out, name


def test_the_compiled_adapter_share_is_fitted_on_layer_pairs_of_both_precisions():
    """compiled_adapter_fused cites no step: each of its rows is one compiled layer timed with and without train.py's
    adapters at one shape, and both bf16 and float8 pairs are there (a float8 LoRA step prices its adapters so too)."""
    gaps = fit_compute.adapter_gap_rows()
    fit = json.loads(FIT.read_text())[fit_compute.ADAPTER_FUSED]
    labels = {f"{g['file']}: " for g in gaps}
    assert len(fit["rows"]) == len(gaps) and all(any(r.startswith(x) for x in labels) for r in fit["rows"])
    assert {g["precision"] for g in gaps} == {"bf16", "fp8"}
    assert all(g["measured_ms"] > 0 and g["targets"] for g in gaps)
    assert 0.0 < fit["value"] < 1.0  # at a bound it would be carrying something else, as the step fit's 1.0 did


def test_every_fitted_constant_cites_fit_rows_only():
    rows = load_rows(load_files())
    for name, select, _ in fit_compute.FITS:
        chosen = select(rows)
        assert chosen, name
        assert {r.role for r in chosen} == {"fit"}, name
    fit = json.loads(FIT.read_text())
    assert all(fit[name]["rows"] for name, _, _ in fit_compute.FITS if name in fit)


def test_a_supplement_adds_layer_rows_and_keeps_what_the_table_measured(tmp_path):
    """bench/scripts/qlora_layer.py's rows (train.py's NF4 layers, which the probe cannot build) join the table's
    layer rows with their file named; a row of a shape the table already holds stays the probe's."""
    from generator.estimate.compute_source import SHIPPED
    from generator.estimate.compute_table import from_document

    doc = json.loads(SHIPPED.read_text())
    doc["layers"] = [r for r in doc["layers"] if r["variant"] != "qlora"]  # the probe's own rows only
    held = doc["layers"][0]
    untimed = {k: v for k, v in held.items() if k not in ("ckpt_ms_per_layer", "source")}
    qlora = {**untimed, "variant": "qlora", "mb": 1, "seq": 2048, "fwd_ms_per_layer": 30.0, "fwdbwd_ms_per_layer": 90.0}
    again = {**held, "fwd_ms_per_layer": held["fwd_ms_per_layer"] * 9}
    path = tmp_path / "qlora-layers.json"
    path.write_text(json.dumps({"kind": "qlora-layers", "device": "NVIDIA H200", "layers": [qlora, again]}))
    out = fit_compute.supplemented(doc, path)
    assert out["layers"] == [*doc["layers"], {**qlora, "source": path.name}]
    assert path.name in out["supplements"] and out["attention"] == doc["attention"]
    key = tuple(held[k] for k in ("hidden", "intermediate", "heads", "kv_heads", "experts", "top_k")) + ("qlora", False)
    assert from_document(out, "supplemented").layers[key] == ((1, 2048, 0.03, 0.06, None),)


def test_a_supplement_adds_gemm_rows_below_the_grid_and_the_table_reads_them(tmp_path):
    """bench/scripts/small_gemms.py's 1,024-token rows: without them a 1,024-token GEMM is priced as long as the
    2,048-token one (the table's floor below its smallest measured size); with them, at the measured rate. A row of a
    shape the table holds stays the probe's."""
    from generator.estimate.compute_source import SHIPPED
    from generator.estimate.compute_table import from_document, gemm_tflops

    doc = json.loads(SHIPPED.read_text())
    doc["gemm"] = {dtype: [r for r in rows if r.get("source") is None] for dtype, rows in doc["gemm"].items()}
    held = next(r for r in doc["gemm"]["bf16"] if (r["m"], r["k"], r["n"], r["op"]) == (2048, 4096, 4096, "fwd"))
    before = from_document(doc, "probe")
    assert gemm_tflops(before, "bf16", "fwd", 1024, 4096, 4096) == held["tflops"] / 2  # the floor: same time
    small = {"m": 1024, "k": 4096, "n": 4096, "op": "fwd", "ms": 0.06, "tflops": 572.6}
    path = tmp_path / "small-gemms.json"
    path.write_text(json.dumps({"kind": "gemm-rows", "device": "NVIDIA H200",
                                "gemm": {"bf16": [small, {**held, "tflops": 1.0}]}}))  # fmt: skip
    out = fit_compute.supplemented(doc, path)
    assert out["gemm"]["bf16"] == [*doc["gemm"]["bf16"], {**small, "source": path.name}]
    assert out["gemm"]["fp8"] == doc["gemm"]["fp8"] and path.name in out["supplements"]
    after = from_document(out, "supplemented")
    assert gemm_tflops(after, "bf16", "fwd", 1024, 4096, 4096) == 572.6
    assert gemm_tflops(after, "bf16", "fwd", 2048, 4096, 4096) == held["tflops"]


def test_small_gemms_writes_a_supplement_that_only_an_h200_file_may_join(tmp_path):
    import pytest

    from bench.scripts import small_gemms

    path = tmp_path / "small-gemms.json"
    small_gemms.main(["--out", str(path)])
    rows = json.loads(path.read_text())["gemm"]["bf16"]
    assert {r["op"] for r in rows} == {"fwd", "dgrad", "wgrad"} and all(r["tflops"] > 0 for r in rows)
    with pytest.raises(SystemExit, match="not an H200"):
        fit_compute.supplemented({"gemm": {}}, path)
