"""Bundled reference machines (`--machine NAME`) and the JSON sidecar that says what `topo -m` text cannot.

Each machine is `generator/machines/NAME.txt` (nvidia-smi topo -m text) plus `NAME.json` (GPU name, memory, PCIe
generation...). A user's `--topo-file F.txt` may have the same sidecar beside it as `F.json` or `F.txt.json`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

from generator.errors import UserError
from generator.topology.build import build_topology
from generator.topology.hardware import Hardware
from generator.topology.smi_text import parse_matrix
from generator.topology.types import MACHINE_SOURCE, Topology

REFERENCE_MACHINES: dict[str, str] = {
    "h200-sxm-2": "2x H200 SXM 141 GB over NVSwitch (NV18): the measured machine, real nvidia-smi capture",
    "hgx-h200-8": "8x H200 SXM 141 GB, NVSwitch (NV18 between every pair), two sockets, 8 NICs",
    "h200-nvl-8": "8x H200 NVL 141 GB, two NVLink groups of four (NV6 per pair), SYS between the groups",
    "pcie-l40s-8": "8x L40S 48 GB on PCIe Gen4, two sockets, no NVLink",
    "rtx4090-2": "2x RTX 4090 24 GB consumer cards over PCIe Gen4, no peer-to-peer",
}
DEFAULT_MACHINE = "h200-sxm-2"

# Sidecar keys -> expected JSON types. "notes" / "memory_source" are free text for people.
_SIDECAR_KEYS: dict[str, tuple[type, ...]] = {
    "gpu_name": (str,),
    "memory_gb": (int, float),
    "nvlink_gen": (int, type(None)),
    "nvlink_total": (int,),
    "pcie_gen": (int,),
    "p2p": (bool,),
    "inter_node_gbps": (int, float, type(None)),
    "memory_source": (str,),
    "notes": (str,),
}


def hardware_from_sidecar(meta: Any, where: str) -> tuple[Hardware, float | None]:
    """Validate a sidecar object; returns the hardware facts and the inter-node bandwidth (if any)."""
    if not isinstance(meta, dict):
        raise UserError(f'{where}: expected a JSON object such as {{"gpu_name": "NVIDIA H200", "memory_gb": 141}}')
    for key, value in meta.items():
        if key not in _SIDECAR_KEYS:
            raise UserError(f"{where}: unknown key {key!r}; allowed: {', '.join(_SIDECAR_KEYS)}")
        if not isinstance(value, _SIDECAR_KEYS[key]) or (isinstance(value, bool) and key != "p2p"):
            raise UserError(f"{where}: {key!r} has the wrong type ({type(value).__name__})")
    if meta.get("memory_gb") is not None and not 0 < meta["memory_gb"] < 10_000:
        raise UserError(f"{where}: memory_gb must be a positive number of decimal GB")
    hw = Hardware(
        **{
            k: meta[k]
            for k in ("gpu_name", "memory_gb", "nvlink_gen", "nvlink_total", "pcie_gen", "p2p")
            if meta.get(k) is not None
        }
    )
    return hw, meta.get("inter_node_gbps")


def read_sidecar(topo_path: str) -> tuple[dict | None, str | None]:
    """The JSON sidecar beside a topology file, if there is one: (object, its path)."""
    p = Path(topo_path)
    for candidate in (p.with_suffix(".json"), Path(f"{topo_path}.json")):
        if candidate != p and candidate.is_file():
            from generator.fileio import read_text

            text = read_text(str(candidate), "topology sidecar")
            try:
                return json.loads(text), str(candidate)
            except json.JSONDecodeError as exc:
                raise UserError(f"topology sidecar {str(candidate)!r} is not valid JSON (line {exc.lineno})") from None
    return None, None


def topology_from_text(
    text: str, source: str, meta: Any = None, meta_where: str = "", flags: Hardware | None = None
) -> Topology:
    """`flags` (--gpu / --gpu-memory-gb) win over the sidecar; a --gpu naming another part than the sidecar's drops the
    sidecar's memory, which the catalog then gives for the part named."""
    hw, inter = hardware_from_sidecar(meta, meta_where) if meta is not None else (Hardware(), None)
    if flags is not None and flags.memory_gb is None and flags.renames(hw.gpu_name):
        hw = replace(hw, memory_gb=None)
    given = flags.merged(hw) if flags is not None else hw
    return build_topology(parse_matrix(text), source, given=given, inter_node_gbps=inter)


def load_machine(name: str) -> Topology:
    if name not in REFERENCE_MACHINES:
        raise UserError(f"unknown machine {name!r}; choose from: {', '.join(REFERENCE_MACHINES)}")
    folder = resources.files("generator").joinpath("machines")
    text = folder.joinpath(f"{name}.txt").read_text(encoding="utf-8")
    meta = json.loads(folder.joinpath(f"{name}.json").read_text(encoding="utf-8"))
    return topology_from_text(text, f"{MACHINE_SOURCE}{name}", meta, f"machine {name}")
