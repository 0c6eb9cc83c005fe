"""bench/fit_compute.py reproduces generator/compute/fit.json from the shipped table and the committed rows, and
fits only on fit rows."""

import json

from bench import fit_compute
from bench.calibration import load_files, load_rows
from generator.estimate.compute_source import FIT


def test_the_committed_fit_is_what_the_script_fits(capsys):
    assert fit_compute.main(["--check"]) == 0
    out = capsys.readouterr().out
    fit = json.loads(FIT.read_text())
    for name, _, _ in fit_compute.FITS:
        if name in fit:
            assert f"{name} = {fit[name]['value']:.4g} " in out, name


def test_every_fitted_constant_cites_fit_rows_only():
    rows = load_rows(load_files())
    for name, select, _ in fit_compute.FITS:
        chosen = select(rows)
        assert chosen, name
        assert {r.role for r in chosen} == {"fit"}, name
    fit = json.loads(FIT.read_text())
    assert all(fit[name]["rows"] for name, _, _ in fit_compute.FITS if name in fit)
