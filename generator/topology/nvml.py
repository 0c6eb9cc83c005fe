"""Live topology through NVML (nvidia-ml-py). Every NVML call is guarded: drivers differ in what they support, and a
missing answer must degrade to "unknown" (or to the `nvidia-smi topo -m` fallback), never to a crash."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from generator.topology.build import GpuFacts, RawMatrix

# NVML constants, written out because some bindings get them wrong (NVML_P2P_CAPS_INDEX_READ is a tuple in 13.x).
_P2P_CAPS_INDEX_READ = 0
_P2P_STATUS_OK = 0
_FEATURE_ENABLED = 1
_DEVICE_TYPE_SWITCH = 2
_AFFINITY_SCOPE_NODE = 0
_MAX_LINKS = 18  # used when the binding does not say (NVML_NVLINK_MAX_LINKS)
_CPU_WORDS = 64  # 64 x 64-bit words = 4096 CPUs
# nvmlDeviceGetTopologyCommonAncestor levels -> nvidia-smi path kinds.
_BUS_ID = re.compile(r"(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-9a-f])")
_LEVELS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


class NvmlUnavailable(Exception):
    """NVML cannot be used here (no library, no driver, no GPU); the message says why."""


@dataclass
class NvmlReading:
    raw: RawMatrix | None
    """Complete path matrix, or None when NVML could not name every pair's path (then read `nvidia-smi topo -m`)."""
    facts: dict[int, GpuFacts] = field(default_factory=dict)
    """Per-GPU name, memory, bus id, NVLink count, PCIe generation."""
    numa: dict[int, int | None] = field(default_factory=dict)
    """NUMA node per GPU where NVML knows it."""
    cpu_affinity: dict[int, str | None] = field(default_factory=dict)
    """CPU list per GPU where NVML knows it."""
    p2p: dict[tuple[int, int], bool] = field(default_factory=dict)
    """Peer-to-peer read status per pair (i < j) where NVML answered."""
    gaps: list[str] = field(default_factory=list)
    """What NVML could not answer."""


def _call(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # NVMLError subclasses, missing symbols in old drivers, ctypes errors: all mean "unknown"
        return None


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def _bus_key(bus_id: Any) -> str | None:
    """ "00000000:18:00.0" and "0000:18:00.0" -> "0:24:0.0", so remote-link bus ids match the GPUs' own."""
    m = _BUS_ID.fullmatch((_text(bus_id) or "").strip().lower())
    if not m:
        return None
    domain, bus, dev, fn = (int(g or "0", 16) for g in m.groups())
    return f"{domain}:{bus}:{dev}.{fn}"


def cpu_list(masks: Any) -> str | None:
    """NVML CPU affinity bitmask words -> "0-31,64-95"."""
    try:
        cpus = [w * 64 + b for w, word in enumerate(masks) for b in range(64) if (int(word) >> b) & 1]
    except (TypeError, ValueError):
        return None
    ranges: list[str] = []
    for cpu in cpus:
        if ranges and cpu == int(ranges[-1].split("-")[-1]) + 1:
            ranges[-1] = f"{ranges[-1].split('-')[0]}-{cpu}"
        else:
            ranges.append(str(cpu))
    return ",".join(ranges) or None


def _numa(nvml: Any, handle: Any) -> int | None:
    node = _call(getattr(nvml, "nvmlDeviceGetNumaNodeId", None), handle)
    if isinstance(node, int) and node >= 0:
        return node
    masks = _call(getattr(nvml, "nvmlDeviceGetMemoryAffinity", None), handle, _CPU_WORDS, _AFFINITY_SCOPE_NODE)
    for w, word in enumerate(masks or ()):
        for b in range(64):
            if (int(word) >> b) & 1:
                return w * 64 + b
    return None


def _nvlinks(nvml: Any, handle: Any, gpu_bus: dict[str, int], gaps: list[str], me: int) -> tuple[Counter, int, int]:
    """Links to each peer GPU, links to NVSwitches, active links in all."""
    peers: Counter = Counter()
    switch = active = 0
    for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", _MAX_LINKS))):
        if _call(getattr(nvml, "nvmlDeviceGetNvLinkState", None), handle, link) != _FEATURE_ENABLED:
            continue
        active += 1
        remote = _call(getattr(nvml, "nvmlDeviceGetNvLinkRemotePciInfo", None), handle, link)
        key = _bus_key(getattr(remote, "busId", None))
        kind = _call(getattr(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", None), handle, link)
        if key in gpu_bus:
            peers[gpu_bus[key]] += 1
        elif kind == _DEVICE_TYPE_SWITCH or key is not None:
            switch += 1
        else:
            gaps.append(f"GPU {me} NVLink {link}: remote end unknown")
    return peers, switch, active


def read_nvml(nvml: Any) -> NvmlReading:
    """Read every GPU through the `pynvml` module object `nvml`. Raises NvmlUnavailable when NVML cannot start or
    sees no GPU; otherwise returns what it could read, with `raw` None if any pair's path kind is unknown."""
    try:
        nvml.nvmlInit()
    except Exception as exc:
        raise NvmlUnavailable(f"NVML did not start ({exc.__class__.__name__}: {exc})") from None
    try:
        return _read(nvml)
    finally:
        _call(getattr(nvml, "nvmlShutdown", None))


def _read(nvml: Any) -> NvmlReading:
    count = _call(nvml.nvmlDeviceGetCount)
    if not isinstance(count, int) or count < 1:
        raise NvmlUnavailable("NVML sees no GPU")
    handles = [_call(nvml.nvmlDeviceGetHandleByIndex, i) for i in range(count)]
    if any(h is None for h in handles):
        raise NvmlUnavailable("NVML could not open every GPU")
    reading = NvmlReading(raw=None)
    bus = {}
    for i, h in enumerate(handles):
        pci = _call(getattr(nvml, "nvmlDeviceGetPciInfo", None), h)
        bus[i] = _text(getattr(pci, "busId", None))
        memory = _call(getattr(nvml, "nvmlDeviceGetMemoryInfo", None), h)
        total = getattr(memory, "total", None)
        reading.facts[i] = GpuFacts(
            name=_text(_call(getattr(nvml, "nvmlDeviceGetName", None), h)),
            memory_gb=round(total / 1e9, 2) if isinstance(total, int) else None,
            pci_bus_id=bus[i],
            pcie_gen=_call(getattr(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", None), h),
        )
        reading.numa[i] = _numa(nvml, h)
        masks = _call(getattr(nvml, "nvmlDeviceGetCpuAffinity", None), h, _CPU_WORDS)
        reading.cpu_affinity[i] = cpu_list(masks) if masks is not None else None
    gpu_bus = {k: i for i, b in bus.items() if (k := _bus_key(b))}
    links = {}
    for i, h in enumerate(handles):
        links[i] = _nvlinks(nvml, h, gpu_bus, reading.gaps, i)
        f = reading.facts[i]
        reading.facts[i] = GpuFacts(f.name, f.memory_gb, f.pci_bus_id, links[i][2], f.pcie_gen)
    codes: dict[tuple[int, int], str] = {}
    for i in range(count):
        for j in range(i + 1, count):
            status = _call(getattr(nvml, "nvmlDeviceGetP2PStatus", None), handles[i], handles[j], _P2P_CAPS_INDEX_READ)
            if isinstance(status, int):
                reading.p2p[(i, j)] = status == _P2P_STATUS_OK
            direct = max(links[i][0][j], links[j][0][i])
            switched = min(links[i][1], links[j][1])
            if direct or switched:
                codes[(i, j)] = f"NV{direct or switched}"
                continue
            level = _call(getattr(nvml, "nvmlDeviceGetTopologyCommonAncestor", None), handles[i], handles[j])
            if level in _LEVELS:
                codes[(i, j)] = _LEVELS[level]
            else:
                reading.gaps.append(f"GPUs {i}-{j}: PCIe path unknown")
    if not reading.gaps:
        reading.raw = RawMatrix(tuple(range(count)), codes, dict(reading.numa), dict(reading.cpu_affinity))
    return reading


def driver_version() -> str | None:
    """The NVIDIA driver's version as NVML reports it, or None without NVML (results files record it)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return _text(pynvml.nvmlSystemGetDriverVersion())
    except Exception:  # no NVML or no driver: the version is simply not recorded
        return None
