"""Counts of a model built on the meta device, kept on disk. The build imports torch and transformers (3-15 s), so a
second plan of the same architecture answers from this file with neither imported. An entry is keyed by the config,
the installed transformers and torchao and the code that counts (generator/model/meta.py, saved_count.py,
count_attention.py, pass_count.py, cuda_autocast.py, compiled_count.py and op_count.py): a change to any of them misses,
never answers stale. A cache that cannot be read or written is passed over (a read-only home still plans); a config
transformers refuses is never cached, so its one-line error comes every time."""

from __future__ import annotations

import hashlib
import json
import logging
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from generator.errors import UserError
from generator.fileio import atomic_write, user_cache_dir
from generator.model import (
    compiled_count,
    config_dims,
    count_attention,
    cuda_autocast,
    meta,
    op_count,
    pass_count,
    saved_count,
    saved_storages,
)
from generator.model.meta import MetaCounts
from generator.model.types import LayerOps, LayerSaved

log = logging.getLogger(__name__)


def meta_counts(config: dict, name: str = "the model", compiled: bool = True) -> MetaCounts:
    """meta.meta_counts(config, name, compiled=compiled), from the cache where an entry for exactly this config and
    code exists. Without `compiled` an entry with the compiled counts serves as well (it holds more); the other way
    it does not."""
    with_compiled, without = entries(config)
    for path in (with_compiled, None if compiled else without):
        hit = _read(path) if path is not None else None
        if hit is not None:
            return hit
    path = with_compiled if compiled else without
    # the build takes seconds (up to 15 on a 2-core machine, about 1 without the compiled counts): say what the wait
    # is, once per config
    log.info(
        "sizing %s: building its %s layers on the meta device with transformers (no weights; once, then cached)",
        name,
        config.get("model_type", "?"),
    )
    counts = meta.meta_counts(config, name, compiled=compiled)
    if path is not None:
        _write(path, counts)
    return counts


def entries(config: dict) -> tuple[Path | None, Path | None]:
    """The cache files for this config counted with and without the compiled block's counts, or Nones where
    transformers is not installed (the build will say so)."""
    try:
        installed = version("transformers")
    except PackageNotFoundError:
        return None, None
    key = hashlib.sha256(json.dumps(config, sort_keys=True, default=repr).encode())
    key.update(installed.encode())
    try:  # the float8 count converts the block with torchao's Float8Linear (model.compiled_count)
        key.update(version("torchao").encode())
    except PackageNotFoundError:
        key.update(b"no torchao")
    counters = (
        meta,
        config_dims,
        saved_count,
        count_attention,
        saved_storages,
        pass_count,
        cuda_autocast,
        compiled_count,
        op_count,
    )
    for counter in counters:
        key.update(Path(counter.__file__).read_bytes())
    without = key.copy()
    without.update(b"no compiled counts")
    folder = user_cache_dir() / "meta"
    return folder / f"{key.hexdigest()[:32]}.json", folder / f"{without.hexdigest()[:32]}.json"


def _from_json(d: dict) -> MetaCounts:
    linear = d["linear_names"]
    return MetaCounts(
        total=int(d["total"]),
        experts=int(d["experts"]),
        attentions=tuple(d["attentions"]),
        dims=dict(d["dims"]),
        layer_cls=d["layer_cls"],
        linear_names=None if linear is None else tuple(linear),
        qk_norm=bool(d.get("qk_norm", False)),
        linears=tuple(tuple(x) for x in d.get("linears", ())),
        expert_blocks=int(d.get("expert_blocks", 0)),
        experts_layout=tuple(d.get("experts_layout", ())),
        norms=tuple(tuple(x) for x in d.get("norms", ())),
        position_table=bool(d.get("position_table", False)),
        not_linear=tuple(d.get("not_linear", ())),
        saved=_saved(d["saved"]) if d.get("saved") else None,
        ops=LayerOps(*(tuple(x) for x in d["ops"])) if d.get("ops") else None,
    )


def _saved(values: list) -> LayerSaved:
    saved = LayerSaved(*values)
    return saved._replace(shared_inputs=tuple(tuple(group) for group in saved.shared_inputs))


def _read(path: Path) -> MetaCounts | None:
    try:
        return _from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):  # absent, half-written by hand, another layout
        return None


def _write(path: Path, counts: MetaCounts) -> None:
    """Only counts that come back equal from JSON: a dimension JSON would turn into another type is not cached."""
    try:
        text = json.dumps(counts._asdict())
        if _from_json(json.loads(text)) != counts:
            return
        atomic_write(path, text + "\n", force=True)
    except (OSError, TypeError, ValueError, UserError):
        pass
