"""Where a topology comes from: a file, a bundled machine, or this machine (NVML first, then `nvidia-smi topo -m`),
and, with no GPU at all, the default reference machine with a warning that says so."""

from __future__ import annotations

import importlib
import shutil
import subprocess
from dataclasses import replace

from generator.catalog.gpus import find_gpu
from generator.errors import UserError
from generator.fileio import read_text
from generator.topology.build import RawMatrix, build_topology
from generator.topology.hardware import Hardware
from generator.topology.json_file import looks_like_json, topology_from_json
from generator.topology.machines import (
    DEFAULT_MACHINE,
    REFERENCE_MACHINES,
    load_machine,
    read_sidecar,
    topology_from_text,
)
from generator.topology.nvml import NvmlReading, NvmlUnavailable, read_nvml
from generator.topology.smi_text import parse_matrix
from generator.topology.types import Topology

SMI_TIMEOUT_S = 10.0  # `nvidia-smi topo -m` answers in well under a second; a wedged driver must not hang us


def load_topology(
    topo_file: str | None = None,
    machine: str | None = None,
    gpu: str | None = None,
    gpu_memory_gb: float | None = None,
) -> Topology:
    """A file (`-` = stdin; `nvidia-smi topo -m` text or saved `topo --json`), a bundled machine name, or (both None)
    this machine's live topology. `gpu` / `gpu_memory_gb` name the GPUs where the source cannot."""
    if topo_file is not None and machine is not None:
        raise UserError("give either --topo-file or --machine, not both")
    if gpu_memory_gb is not None and not 0 < gpu_memory_gb < 10_000:
        raise UserError(f"--gpu-memory-gb must be a positive number of GB, got {gpu_memory_gb:g}")
    flags = Hardware(gpu_name=gpu or None, memory_gb=gpu_memory_gb)
    if machine is not None:
        if flags != Hardware():
            raise UserError(f"--machine {machine} already names its GPUs; --gpu / --gpu-memory-gb go with --topo-file")
        return load_machine(machine)
    if topo_file is not None:
        text = read_text(topo_file, "topology file")
        source = "file:-" if topo_file == "-" else f"file:{topo_file}"
        try:
            if looks_like_json(text):
                return _with_flags(topology_from_json(text, source), flags)
            meta, where = read_sidecar(topo_file) if topo_file != "-" else (None, None)
            return topology_from_text(text, source, meta, f"topology sidecar {where!r}", flags)
        except UserError as exc:
            where_text = "standard input" if topo_file == "-" else repr(topo_file)
            raise UserError(f"topology file {where_text}: {exc}") from None
    return _with_flags(detect_live(), flags)


def _with_flags(topo: Topology, flags: Hardware) -> Topology:
    """--gpu / --gpu-memory-gb over a topology read whole (saved JSON, live detection, the reference machine shown
    when no GPU is found). A GPU whose memory is unknown, or renamed to another catalog part, takes the catalog's
    figure: memory read from an H200 does not describe the H100 the user named."""
    if flags == Hardware():
        return topo
    part = find_gpu(flags.gpu_name)
    catalog_gb = part.read_memory_gb if part is not None else None
    if topo.from_catalog and flags.gpu_name and part is None and not flags.memory_gb:
        # The reference machine shown when no GPU is found holds no memory figure for a part the catalog lacks.
        raise UserError(
            f"--gpu {flags.gpu_name!r} is not in the GPU catalog and no GPU was detected to read its memory from: "
            "pass --gpu-memory-gb N (decimal GB) as well"
        )

    def memory_gb(g) -> float:
        if flags.memory_gb:
            return flags.memory_gb
        if catalog_gb and (flags.renames(g.name) or g.memory_gb <= 0):
            return catalog_gb
        return g.memory_gb if g.memory_gb > 0 else 0.0

    gpus = tuple(replace(g, name=flags.gpu_name or g.name, memory_gb=memory_gb(g)) for g in topo.gpus)
    renamed = sorted({g.name for g in topo.gpus if flags.renames(g.name)})
    notes = (
        (f"--gpu {flags.gpu_name}: the {', '.join(renamed)} GPUs read from {topo.source} are taken as {part.name} "
         f"({gpus[0].memory_gb:g} GB{' from --gpu-memory-gb' if flags.memory_gb else ' from the GPU catalog'}); "
         "links as read",)
        if renamed
        else ()
    )  # fmt: skip
    return replace(topo, gpus=gpus, warnings=topo.warnings + notes)


def run_nvidia_smi(timeout_s: float = SMI_TIMEOUT_S) -> tuple[str | None, str]:
    """(`nvidia-smi topo -m` output, "") or (None, why not)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, "nvidia-smi not found"
    try:
        done = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return None, f"`nvidia-smi topo -m` did not answer within {timeout_s:g} s"
    except OSError as exc:
        return None, f"nvidia-smi could not run ({exc.strerror or exc})"
    if done.returncode != 0:
        first = (done.stdout + done.stderr).strip().splitlines()
        return None, f"`nvidia-smi topo -m` failed: {first[0][:160] if first else f'exit code {done.returncode}'}"
    return done.stdout, ""


def _read_nvml(nvml_module) -> tuple[NvmlReading | None, str]:
    try:
        nvml = nvml_module if nvml_module is not None else importlib.import_module("pynvml")
    except Exception:
        return None, "nvidia-ml-py (pynvml) is not installed"
    try:
        return read_nvml(nvml), ""
    except NvmlUnavailable as exc:
        return None, str(exc)


def _with_nvml_facts(raw: RawMatrix, reading: NvmlReading | None) -> tuple[RawMatrix, NvmlReading | None, str]:
    if reading is None:
        return raw, None, ""
    if set(reading.facts) != set(raw.gpu_ids):
        return raw, None, "NVML and nvidia-smi list different GPUs; GPU names and memory from NVML were dropped"
    numa = {g: reading.numa.get(g) if reading.numa.get(g) is not None else raw.numa.get(g) for g in raw.gpu_ids}
    cpus = {g: reading.cpu_affinity.get(g) or raw.cpu_affinity.get(g) for g in raw.gpu_ids}
    return replace(raw, numa=numa, cpu_affinity=cpus), reading, ""


def detect_live(nvml_module=None, timeout_s: float = SMI_TIMEOUT_S) -> Topology:
    reading, nvml_why = _read_nvml(nvml_module)
    if reading is not None and reading.raw is not None:
        return build_topology(reading.raw, "nvml", facts=reading.facts, p2p=reading.p2p)
    text, smi_why = run_nvidia_smi(timeout_s)
    if text is not None:
        try:
            raw = parse_matrix(text)
        except UserError as exc:
            smi_why = f"`nvidia-smi topo -m` output unreadable ({exc})"
        else:
            raw, reading, note = _with_nvml_facts(raw, reading)
            notes = (note,) if note else ()
            if reading is not None:
                notes += (f"NVML could not describe every link ({'; '.join(reading.gaps[:3])}); used nvidia-smi",)
            facts, p2p = (reading.facts, reading.p2p) if reading else (None, None)
            return build_topology(raw, "nvidia-smi", facts=facts, p2p=p2p, extra_warnings=notes)
    if reading is not None:
        raise UserError(
            f"NVML sees {len(reading.facts)} GPU(s) but cannot name every link ({'; '.join(reading.gaps[:3])}) and "
            f"{smi_why}; save `nvidia-smi topo -m` to a file and pass --topo-file"
        )
    topo = load_machine(DEFAULT_MACHINE)
    why = "; ".join(w for w in (nvml_why, smi_why) if w)
    warning = (
        f"no NVIDIA GPU detected ({why}): showing the reference machine {DEFAULT_MACHINE} "
        f"({REFERENCE_MACHINES[DEFAULT_MACHINE]}); pass --machine or --topo-file to describe another machine"
    )
    return replace(topo, warnings=(warning,) + topo.warnings)
