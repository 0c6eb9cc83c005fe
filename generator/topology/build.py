"""Turn what a reader found (path codes per GPU pair, per-GPU facts) into a `Topology` with predicted bandwidths.

Every source (topo -m text, NVML, a bundled machine) ends here, so the link model is applied one way only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from generator.catalog.gpus import find_gpu
from generator.topology.bandwidth import nvlink_pair_gbps, pcie_path_gbps
from generator.topology.hardware import Hardware, infer_from_links, lookup
from generator.topology.types import Gpu, Link, Topology

MEMORY_HINT = (
    "pass --gpu NAME (e.g. --gpu H100; memory from the GPU catalog) or --gpu-memory-gb N, or put FILE.json with "
    '{"gpu_name": ..., "memory_gb": ...} beside the topology file'
)
"""How to give what `nvidia-smi topo -m` text never says; every message about unknown GPU memory ends with it."""


@dataclass(frozen=True)
class RawMatrix:
    gpu_ids: tuple[int, ...]
    """PCI-order indices, in the order the source listed them."""
    codes: dict[tuple[int, int], str]
    """(i, j) with i < j -> "NV18", "PIX", "PXB", "PHB", "NODE" or "SYS" (legacy "SOC" already read as "SYS")."""
    numa: dict[int, int | None] = field(default_factory=dict)
    """NUMA node per GPU where the source gave one."""
    cpu_affinity: dict[int, str | None] = field(default_factory=dict)
    """CPU list per GPU as printed ("0-31")."""
    nics: tuple[str, ...] = ()
    """NIC names (legend names when a `NIC Legend:` block maps NIC0 -> mlx5_0)."""
    nic_numa: dict[str, int] = field(default_factory=dict)
    """NUMA node per NIC, taken from the nearest GPU (non-SYS path)."""
    warnings: tuple[str, ...] = ()
    """What the reader worked around."""


@dataclass(frozen=True)
class GpuFacts:
    """What a live reader (NVML) knows about one GPU beyond the path matrix."""

    name: str | None = None
    memory_gb: float | None = None
    pci_bus_id: str | None = None
    nvlink_total: int | None = None
    pcie_gen: int | None = None


def _nv_count(code: str) -> int:
    return int(code[2:]) if code.startswith("NV") else 0


def resolve_hardware(raw: RawMatrix, given: Hardware) -> tuple[Hardware, list[str]]:
    """Fill what `given` (sidecar / NVML) leaves unknown from the GPU catalog, then from the NV# counts."""
    warnings: list[str] = []
    hw = given.merged(lookup(given.gpu_name))
    per_gpu = dict.fromkeys(raw.gpu_ids, 0)
    for (i, j), code in raw.codes.items():
        per_gpu[i] += _nv_count(code)
        per_gpu[j] += _nv_count(code)
    max_pair = max((_nv_count(c) for c in raw.codes.values()), default=0)
    guessed = infer_from_links(max_pair, max(per_gpu.values(), default=0))
    assumed = []
    if max_pair and hw.nvlink_gen is None:
        hw = hw.merged(Hardware(nvlink_gen=guessed.nvlink_gen, nvlink_total=guessed.nvlink_total))
        assumed.append(f"NVLink{guessed.nvlink_gen} rates (from NV{max_pair})")
    if hw.pcie_gen is None:
        hw = hw.merged(Hardware(pcie_gen=guessed.pcie_gen))
        assumed.append(f"PCIe Gen{guessed.pcie_gen}")
    if assumed:
        guess = " and ".join(assumed)
        what = f"GPU {hw.gpu_name!r} is not in the GPU catalog" if hw.gpu_name else "GPU model not named in the input"
        warnings.append(f"{what}: assumed {guess} for the predicted bandwidths")
    part = find_gpu(hw.gpu_name)
    if hw.memory_gb is None and part is not None:
        hw = replace(hw, memory_gb=part.read_memory_gb)
        warnings.append(
            f"GPU memory not given: using the GPU catalog's {hw.memory_gb:g} GB for {part.name}; "
            "pass --gpu-memory-gb N if this card differs"
        )
    if hw.memory_gb is None:
        warnings.append(f"{'GPU memory' if hw.gpu_name else 'GPU name and memory'} unknown: {MEMORY_HINT}")
    return hw, warnings


def build_topology(
    raw: RawMatrix,
    source: str,
    given: Hardware | None = None,
    facts: dict[int, GpuFacts] | None = None,
    p2p: dict[tuple[int, int], bool] | None = None,
    inter_node_gbps: float | None = None,
    extra_warnings: tuple[str, ...] = (),
) -> Topology:
    facts = facts or {}
    p2p = p2p or {}
    names = {f.name for f in facts.values() if f.name}
    memories = [f.memory_gb for f in facts.values() if f.memory_gb]
    live = Hardware(gpu_name=min(names, default=None), memory_gb=min(memories, default=None))
    hw, warnings = resolve_hardware(raw, (given or Hardware()).merged(live))
    if len(names) > 1:
        warnings.append(f"mixed GPU models ({', '.join(sorted(names))}): bandwidths use {hw.gpu_name}'s rates")
    pcie_gens = [f.pcie_gen for f in facts.values() if f.pcie_gen]
    pcie_gen = min(pcie_gens) if pcie_gens else hw.pcie_gen
    gpus = []
    for g in sorted(raw.gpu_ids):
        f = facts.get(g, GpuFacts())
        gpus.append(
            Gpu(
                index=g,
                name=f.name or hw.gpu_name or "unknown GPU",
                memory_gb=f.memory_gb if f.memory_gb is not None else (hw.memory_gb or 0.0),
                numa=raw.numa.get(g),
                cpu_affinity=raw.cpu_affinity.get(g),
                pci_bus_id=f.pci_bus_id,
                nvlink_total=f.nvlink_total if f.nvlink_total is not None else hw.nvlink_total,
            )
        )
    links = {}
    for (i, j), code in raw.codes.items():
        ok = p2p.get((i, j), hw.p2p)
        if code.startswith("NV"):
            n = _nv_count(code)
            links[(i, j)] = Link("NV", n, round(nvlink_pair_gbps(n, hw.nvlink_gen), 1), ok)
        else:
            links[(i, j)] = Link(code, 0, round(pcie_path_gbps(code, pcie_gen, ok), 1), ok)
    return Topology(
        gpus=tuple(gpus),
        links=links,
        source=source,
        nics=raw.nics,
        nic_numa=dict(raw.nic_numa),
        warnings=tuple(raw.warnings) + tuple(extra_warnings) + tuple(warnings),
        inter_node_gbps=inter_node_gbps,
        pcie_gen=pcie_gen,
    )
