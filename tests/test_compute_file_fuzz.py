"""Property test for `plan --compute-file`'s reader: a probe file with any one value replaced or removed (rows of
every section, a model's own host rows among them) loads or ends in one UserError, never another exception; what
loads prices a step."""

from __future__ import annotations

import copy
import json
import tempfile
from dataclasses import replace
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generator.errors import UserError
from generator.estimate import Placement, Workload, estimate
from generator.estimate.compute_source import SHIPPED
from generator.model import load_model
from generator.probe.compute_file import load_compute_file

QWEN = load_model("qwen2.5-7b")
ONE = Placement(num_gpus_per_machine=1, gpu_name="NVIDIA H200", gpu_memory_gb=150.75, busbw_gbps=0)
OWN = {"variant": "lora", "compiled": False, "liger": False, "fwd_ms_per_layer": 2.0, "fwdbwd_ms_per_layer": 6.0,
       "step_ms": 9.0, "model": "qwen2.5-7b", "model_type": "qwen2", "experts": 0, "top_k": 0}  # fmt: skip


def _seed() -> dict:
    """The shipped table cut to its first rows of each section, with one own host row."""
    doc = json.loads(SHIPPED.read_text())
    for key, value in doc.items():
        if isinstance(value, list):
            doc[key] = value[:3]
    doc["gemm"] = {dtype: rows[:6] for dtype, rows in doc["gemm"].items()}
    doc["host"] = [*doc["host"][:2], OWN]
    return doc


SEED = _seed()
ROWS = [(s, i) for s, rows in SEED.items() if isinstance(rows, list) for i in range(len(rows))] + [
    (("gemm", dtype), i) for dtype, rows in SEED["gemm"].items() for i in range(len(rows))
]
EDGES = [0, -1, 0.5, 1e-300, 1e300, float("inf"), float("-inf"), float("nan"), None, True, "x", [1], {"a": 1}]
VALUES = st.one_of(
    st.sampled_from(EDGES), st.integers(-5, 10**6), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5), st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(ROWS), st.data(), VALUES, st.booleans())
def test_a_mutated_compute_file_loads_or_is_one_user_error(where, data, value, delete):
    section, i = where
    doc = copy.deepcopy(SEED)
    rows = doc[section[0]][section[1]] if isinstance(section, tuple) else doc[section]
    row = rows[i]
    if isinstance(row, dict) and row:
        key = data.draw(st.sampled_from(sorted(row)))
        if delete:
            del row[key]
        else:
            row[key] = value
    else:
        rows[i] = value
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "compute.json"
        path.write_text(json.dumps(doc))
        try:
            table = load_compute_file(str(path))
        except UserError as exc:
            assert "\n" not in str(exc) and "compute file" in str(exc)
            return
    w = Workload(method="lora", seq_len=2048, micro_batch=1, grad_checkpointing=False, load_dtype="bf16")
    assert estimate(QWEN, w, replace(ONE, compute=table), "ddp").step_s > 0
