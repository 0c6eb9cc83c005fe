"""Read back what `topo --json` printed, so a saved topology can be passed to --topo-file like `nvidia-smi topo -m`
text. The links keep the bandwidths the JSON carries (they came from this engine, or from someone who edited them)."""

from __future__ import annotations

import json
from typing import Any

from generator.errors import UserError
from generator.topology.types import PATH_KINDS, Gpu, Link, Topology


def looks_like_json(text: str) -> bool:
    return text.lstrip().startswith("{")


def topology_from_json(text: str, source: str) -> Topology:
    """`topo --json` output -> Topology; a malformed document raises UserError naming the field."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("gpus"), list) or not isinstance(doc.get("links"), dict):
        raise UserError('expected the object `python -m generator topo --json` prints (with "gpus" and "links")')
    try:
        gpus = tuple(_gpu(g) for g in doc["gpus"])
        links = dict(_link(key, value) for key, value in doc["links"].items())
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"malformed `topo --json` document ({type(exc).__name__}: {exc})") from None
    ids = sorted(g.index for g in gpus)
    if not ids or len(set(ids)) != len(ids):
        raise UserError('"gpus" must list each GPU index once')
    missing = [f"{i}-{j}" for n, i in enumerate(ids) for j in ids[n + 1 :] if (i, j) not in links]
    if missing:
        raise UserError(f'"links" has no entry for GPU pair(s) {", ".join(missing[:4])}')
    return Topology(
        gpus=tuple(sorted(gpus, key=lambda g: g.index)),
        links=links,
        source=source,
        nics=tuple(doc.get("nics") or ()),
        nic_numa={str(k): int(v) for k, v in (doc.get("nic_numa") or {}).items()},
        inter_node_gbps=doc.get("inter_node_gbps"),
        pcie_gen=doc.get("pcie_gen"),
    )


def _gpu(g: Any) -> Gpu:
    memory = float(g.get("memory_gb") or 0.0)
    if memory < 0:
        raise ValueError(f"GPU {g['index']} has negative memory_gb")
    return Gpu(
        index=int(g["index"]),
        name=str(g.get("name") or "unknown GPU"),
        memory_gb=memory,
        numa=g.get("numa"),
        cpu_affinity=g.get("cpu_affinity"),
        pci_bus_id=g.get("pci_bus_id"),
        nvlink_total=g.get("nvlink_total"),
    )


def _link(key: str, value: Any) -> tuple[tuple[int, int], Link]:
    i, j = sorted(int(part) for part in key.split("-"))
    if value["kind"] not in PATH_KINDS:
        raise ValueError(f"link {key}: kind {value['kind']!r} is not one of {', '.join(PATH_KINDS)}")
    link = Link(value["kind"], int(value.get("nvlinks") or 0), float(value["busbw_gbps"]), value.get("p2p"))
    return (i, j), link
