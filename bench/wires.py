"""The wire between the GPUs a matrix cell runs on (issue 21, run 1): NVLink as the machine is, the host path
(NCCL_P2P_DISABLE=1) and sockets (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1). One owner for what a wire is: its
environment, the cell-key suffix, the probe file that measured it, and the busbw calibration reads for it.

On the GPU machine, once per wire before its cells (bench/gpu_session.sh's `wires` phase does this):

    python bench/wires.py probe --wire sockets --output /tmp/bench-matrix/probe-wire-sockets.json

`generator probe` has no switch for shared memory, so the wire's variables are set around the whole probe (its
workers inherit them) and the file records which (`wire`: name and env): its `subsets` are that wire's busbw, which
is what `plan --bandwidth-file` reads.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script (python bench/wires.py) without the package installed
    sys.path.insert(0, str(REPO))

from bench.harness import SAFE_ENV  # noqa: E402

NVLINK = "nvlink"
WIRES: dict[str, dict[str, str]] = {
    NVLINK: {},
    "p2poff": {"NCCL_P2P_DISABLE": "1"},
    "sockets": {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},
}
"""Wire name -> the NCCL variables a cell's processes (and its probe) run under, on top of harness.SAFE_ENV."""
SLOW_WIRES = ("p2poff", "sockets")
# The core strategies, full fine-tune, checkpointing on (every one of them ran on NVLink at both workloads, so each
# slow-wire cell has its NVLink twin in the committed matrices), at the matrix's two workloads.
WIRE_STRATEGIES = ("ddp", "fsdp", "fsdp_grad_op", "zero1", "zero2", "zero3")
WIRE_WORKLOADS = ((1024, 4), (4096, 1))
WIRE_STEPS = {"sockets": 10}
"""Fewer steps where one step is seconds of all-reduce (a 7B fp32 gradient over ~3 GB/s): 5 warm-up + 5 timed."""


def probe_file(directory: Path, wire: str) -> Path:
    return Path(directory) / f"probe-wire-{wire}.json"


def wire_of(cell: dict) -> str:
    """A cell's wire: the variant part naming one, NVLink otherwise."""
    parts = set(filter(None, cell.get("variant", "").split("-")))
    return next((w for w in SLOW_WIRES if w in parts), NVLINK)


def wire_cells() -> list[tuple]:
    """(gpus, strategy, method, seq, mb, ckpt, variant) of every slow-wire cell, in run_matrix.LEVERS' shape."""
    return [
        (2, s, "full", seq, mb, True, wire)
        for wire in SLOW_WIRES
        for seq, mb in WIRE_WORKLOADS
        for s in WIRE_STRATEGIES
    ]


# Held out of the overlap fit, chosen before any slow-wire data existed: the seq 4096 sockets rows (the slowest wire
# at the workload with the least compute per byte sent, i.e. the furthest extrapolation from NVLink). Every other
# slow-wire row and every NVLink row is a fit row.
WIRE_VALIDATION_KEYS = frozenset(f"g2-{s}-full-s4096-mb1-ckpton-sockets" for s in WIRE_STRATEGIES)


def wire_plan_flags(cell: dict, probes: Path) -> list[str]:
    """A slow-wire cell is planned with that wire's measured busbw (bench/wires.py probe), never NVLink's."""
    wire = wire_of(cell)
    if wire == NVLINK:
        return []
    path = probe_file(probes, wire)
    if not path.exists():
        raise RuntimeError(f"no probe of the {wire} wire at {path}: run `python bench/wires.py probe --wire {wire}`")
    return ["--bandwidth-file", str(path)]


def cell_env(cell: dict, base: dict) -> dict:
    """The launch environment: never NVLink multicast, and the cell's wire."""
    return {**base, **SAFE_ENV, "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "PYTHONUNBUFFERED": "1", **WIRES[wire_of(cell)]}


def busbw_by_wire(files: dict[str, dict]) -> dict[str, dict[int, float]]:
    """Wire -> GPU count -> best measured all-reduce busbw (GB/s, largest message). NVLink: every untagged probe's
    `subsets`; p2poff: untagged probes' `p2p_disabled` section (probe --p2p-disable) and tagged p2poff files; sockets:
    tagged files only. Files from bench/results/ (a results file without `subsets` is not a probe)."""
    out: dict[str, dict[int, float]] = {w: {} for w in WIRES}

    def add(wire: str, section: dict) -> None:
        for key, value in section.items():
            gbps = value.get("all_reduce") if isinstance(value, dict) else value
            n = len(key.split(","))
            out[wire][n] = max(out[wire].get(n, 0.0), float(gbps))

    for data in files.values():
        if not isinstance(data.get("subsets"), dict):
            continue
        tagged = (data.get("wire") or {}).get("name")
        add(tagged or NVLINK, data["subsets"])
        if not tagged:
            add("p2poff", data.get("p2p_disabled") or {})
    return out


def probe(wire: str, output: Path, extra: list[str]) -> int:
    """`generator probe` under the wire's variables; the written file is tagged with the wire."""
    env = {**os.environ, **WIRES[wire]}
    cmd = [sys.executable, "-m", "generator", "probe", "--output", str(output), "--force", *extra]
    res = subprocess.run(cmd, cwd=REPO, env=env)
    if res.returncode != 0:
        return res.returncode
    doc = json.loads(output.read_text())
    doc["wire"] = {"name": wire, "env": WIRES[wire]}
    output.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("probe", help="probe one wire and tag the file with it")
    p.add_argument("--wire", choices=sorted(WIRES), required=True)
    p.add_argument("--output", type=Path, required=True)
    p.add_argument("--sizes", default="16M,256M,1G", help="message sizes for generator probe")
    args, rest = ap.parse_known_args()  # anything else goes to generator probe (e.g. --device cpu in tests)
    return probe(args.wire, args.output, ["--sizes", args.sizes, *rest])


if __name__ == "__main__":
    raise SystemExit(main())
