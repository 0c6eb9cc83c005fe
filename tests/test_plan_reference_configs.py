"""accelerate_configs/ is exactly what the tool writes today: regenerate into a temporary dir and compare bytes."""

from __future__ import annotations

from pathlib import Path

import yaml

from docsgen.reference_configs import CONFIG_DIR, regenerate, scenarios

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / CONFIG_DIR


def test_committed_configs_match_a_fresh_regeneration(tmp_path):
    written = regenerate(tmp_path)
    fresh = {p.name: p.read_bytes() for p in written}
    committed = {p.name: p.read_bytes() for p in COMMITTED.iterdir() if p.is_file()}
    assert sorted(fresh) == sorted(committed), "run: .venv/bin/python -m docsgen.reference_configs"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"{stale} differ; run: .venv/bin/python -m docsgen.reference_configs"


def test_every_scenario_that_fits_has_a_config_and_the_readme_names_it():
    readme = (COMMITTED / "README.md").read_text()
    names = {s.name for s in scenarios()}
    assert "rtx4090-2-mistral-7b-lora" in names and "hgx-h200-8-mistral-7b-full" in names
    for name in names:
        path = COMMITTED / f"{name}.yaml"
        if path.exists():
            data = yaml.safe_load(path.read_text())
            assert data["num_processes"] == len(str(data["gpu_ids"]).split(","))
            assert f"--config_file {CONFIG_DIR}/{name}.yaml" in readme
        else:
            assert f"## {name}: not generated" in readme
    assert "rtx4090-2-mistral-7b-full: not generated" in readme
