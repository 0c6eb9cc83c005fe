"""The meta device's counts of the models the report sizes, committed beside it so a fresh clone's test run need not
count them again.

The report prices every row from its model's counts (generator/model/meta_cache.py), and on a fresh clone's 2-core CI
machine counting the bench models cold took ~90 s of the suite's ~700 (the compiled block's AOTAutograd traces, five a
model). `python bench/report.py` copies the entries it read into `bench/meta-counts/`; tests/conftest.py puts them in
the suite's cache. An entry's file name is its cache key: the config, the installed transformers and torchao and the
counting code's own bytes. So a seed is read only where all of those are what wrote it; after any change to them it
is passed over and the count runs as on a user's first plan (slower, never stale)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

SEEDS = Path(__file__).resolve().parent / "meta-counts"


def refresh(configs: Iterable[dict | None]) -> int:
    """Make SEEDS hold exactly the cache entries of `configs` that the meta device counts (an architecture the
    closed form sizes has none), as the user's cache holds them after a render; returns how many."""
    from generator.model.meta_cache import entries
    from generator.model.sizing import KNOWN_FAMILIES

    wanted = {}
    for config in configs:
        if config is None or config.get("model_type") in KNOWN_FAMILIES:
            continue
        path = entries(config)[0]
        if path is not None and path.is_file():
            wanted[path.name] = path
    SEEDS.mkdir(exist_ok=True)
    for old in SEEDS.glob("*.json"):
        if old.name not in wanted:
            old.unlink()
    for name, path in wanted.items():
        if not (SEEDS / name).is_file() or (SEEDS / name).read_bytes() != path.read_bytes():
            shutil.copyfile(path, SEEDS / name)
    return len(wanted)


def install(folder: Path) -> None:
    """Copy the seeds into a meta cache folder, each written whole (another process may read the folder meanwhile)
    and never over an entry already there."""
    folder.mkdir(parents=True, exist_ok=True)
    for seed in SEEDS.glob("*.json"):
        if (folder / seed.name).exists():
            continue
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".part")
        with os.fdopen(fd, "wb") as out:
            out.write(seed.read_bytes())
        os.replace(tmp, folder / seed.name)
