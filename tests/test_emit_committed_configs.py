"""Every Accelerate YAML committed to the repository (accelerate_configs/, recipes/) passes the three validation
levels of tests/emit_harness.py, launched from the repository root as the READMEs do."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from emit_harness import check_three_levels

ROOT = Path(__file__).resolve().parent.parent


def _accelerate_yamls() -> list[str]:
    found = []
    for top in ("accelerate_configs", "recipes"):
        for p in sorted((ROOT / top).rglob("*.yaml")):
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
            if isinstance(data, dict) and "distributed_type" in data:
                found.append(str(p.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("path", _accelerate_yamls())
def test_committed_config_passes_accelerate(path, monkeypatch):
    monkeypatch.chdir(ROOT)  # DeepSpeed JSON paths inside the YAMLs are relative to the launch directory
    monkeypatch.setattr("accelerate.utils.launch.is_port_in_use", lambda port: False)
    raw = check_three_levels(path)
    text = (ROOT / path).read_text(encoding="utf-8")
    assert text.startswith("# "), "every emitted config starts with the generator's comment header"
    assert yaml.safe_load(text) == raw
