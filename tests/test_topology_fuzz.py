"""Property tests for the topo -m parser: mutated real inputs end in success or one UserError, never another
exception; generated matrices round-trip through the parser in any whitespace style."""

from __future__ import annotations

import math
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generator.errors import UserError
from generator.topology import best_subset, islands, parse_topo_matrix, subset_busbw_gbps
from generator.topology.smi_text import parse_matrix

FIX = Path(__file__).parent / "fixtures" / "topo"
SEEDS = [
    (FIX / name).read_text(encoding="utf-8")
    for name in (
        "h200-sxm-2x-nvswitch.topo-m.txt",
        "h200-nvl-8-two-groups.txt",
        "a100-pcie-4x-nv12-pairs.txt",
        "legacy-soc-4gpu.txt",
        "fused-columns.txt",
        "odd-3gpu-no-legend.txt",
        "single-gpu.txt",
        "prompt-indent-crlf-junk.txt",
        "v100-dgx1-cube-mesh.txt",
    )
]
VOCAB = [
    "GPU0",
    "GPU1",
    "GPU9",
    "GPU",
    "NIC0",
    "mlx5_0",
    "X",
    " X ",
    "NV18",
    "NV0",
    "NV999",
    "SYS",
    "SOC",
    "PIX",
    "PXB",
    "PHB",
    "NODE",
    "OK",
    "CNS",
    "N/A",
    "0-31",
    "0,2",
    "CPU Affinity",
    "NUMA Affinity",
    "GPU NUMA ID",
    "Legend:",
    "NIC Legend:",
    "NIC0: mlx5_0",
    "\t",
    "  ",
    "\n",
    "\r\n",
    "\x1b[4m",
    "\x1b[0m",
    "\x00",
    "\x07",
    "é",
    "\u00a0",
    "\u2028",
    "NVIDIA-SMI has failed",
    "SYSSYS",
    "GPU3NIC0",
    "",
]
OPS = ["delete", "insert", "token", "dup_line", "drop_line", "swap_lines", "retab", "truncate"]
CASES = {"n": 0, "ok": 0, "examples": 0}


def mutate(text: str, op: str, a: float, b: float, payload: str) -> str:
    at, length = int(a * len(text)), int(b * 12)
    lines = text.split("\n")
    li, lj = int(a * (len(lines) - 1)), int(b * (len(lines) - 1))
    if op == "delete":
        return text[:at] + text[at + length :]
    if op == "insert":
        return text[:at] + payload + text[at:]
    if op == "token":
        tokens = text.split("\t")
        tokens[int(a * (len(tokens) - 1))] = payload
        return "\t".join(tokens)
    if op == "dup_line":
        return "\n".join(lines[: li + 1] + [lines[li]] + lines[li + 1 :])
    if op == "drop_line":
        return "\n".join(lines[:li] + lines[li + 1 :])
    if op == "swap_lines":
        lines[li], lines[lj] = lines[lj], lines[li]
        return "\n".join(lines)
    if op == "retab":
        return text.replace("\t", payload or " ")
    return text[:at]


def check_one(text: str) -> None:
    CASES["n"] += 1
    try:
        topo = parse_topo_matrix(text)
    except UserError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    CASES["ok"] += 1
    assert len(topo.links) == len(topo.gpus) * (len(topo.gpus) - 1) // 2
    assert sorted(g for isl in islands(topo) for g in isl) == sorted(topo.indices)
    gbps = subset_busbw_gbps(topo, topo.indices)
    assert gbps > 0 and (len(topo.gpus) > 1 or math.isinf(gbps))
    if CASES["ok"] % 10 == 0:  # the subset search is slower than the parser: sample it
        k = min(2, len(topo.gpus))
        assert len(best_subset(topo, k).gpu_ids) == k


EXAMPLES, PER_EXAMPLE = 2_500, 4  # Hypothesis costs ~2-4 ms per example on CI cores; the parser ~1 ms per input


@settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, len(SEEDS) - 1), rng=st.randoms(use_true_random=False))
def _mutated(seed, rng):
    CASES["examples"] += 1
    for _ in range(PER_EXAMPLE):
        text = SEEDS[(seed + rng.randint(0, 1)) % len(SEEDS)]
        for _ in range(rng.randint(1, 4)):
            op = rng.choice(OPS)
            payload = rng.choice(VOCAB) if rng.random() < 0.7 else "".join(chr(rng.randint(0, 0x2FF)) for _ in range(3))
            text = mutate(text, op, rng.random(), rng.random(), payload)
        check_one(text)


def test_ten_thousand_mutated_inputs_never_crash():
    CASES.update(n=0, ok=0, examples=0)
    _mutated()
    print(
        f"\ntopology parser fuzz: {CASES['n']} mutated inputs from {CASES['examples']} Hypothesis examples; "
        f"{CASES['ok']} parsed, the rest raised UserError"
    )
    assert CASES["n"] >= 10_000


CODES = st.one_of(st.integers(1, 18).map(lambda n: f"NV{n}"), st.sampled_from(["PIX", "PXB", "PHB", "NODE", "SYS"]))


@st.composite
def matrices(draw):
    n = draw(st.integers(1, 9))
    codes = {(i, j): draw(CODES) for i in range(n) for j in range(i + 1, n)}
    numa = [draw(st.integers(0, 3)) for _ in range(n)]
    return n, codes, numa


@settings(max_examples=300, deadline=None, database=None)
@given(m=matrices(), sep=st.sampled_from(["\t", "  ", " \t", "    "]), ansi=st.booleans())
def test_generated_matrices_round_trip(m, sep, ansi):
    n, codes, numa = m
    head = sep.join(f"GPU{i}" for i in range(n)) + sep + "CPU Affinity" + sep + "NUMA Affinity"
    lines = [sep + ("\x1b[4m" + head + "\x1b[0m" if ansi else head)]
    for i in range(n):
        cells = [" X " if i == j else codes[(min(i, j), max(i, j))] for j in range(n)]
        lines.append(sep.join([f"GPU{i}", *cells, f"{numa[i] * 8}-{numa[i] * 8 + 7}", str(numa[i])]))
    raw = parse_matrix("\n".join(lines) + "\n")
    assert raw.codes == codes
    assert [raw.numa[i] for i in range(n)] == numa
