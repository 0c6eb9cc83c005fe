"""Where topologies come from: bundled machines, files (+ sidecar, stdin), NVML (fake module), nvidia-smi, and the
no-GPU fallback that must say what it did."""

from __future__ import annotations

import argparse
import io
import json
import os
import stat
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from generator.errors import UserError
from generator.topology import (
    DEFAULT_MACHINE,
    REFERENCE_MACHINES,
    add_topology_args,
    detect,
    load_machine,
    load_topology,
    topology_from_args,
)
from generator.topology.nvml import cpu_list
from tests.test_topology_parse import FIX, read


@pytest.mark.parametrize("name", sorted(REFERENCE_MACHINES))
def test_every_reference_machine_loads_with_name_and_memory(name):
    topo = load_machine(name)
    assert topo.source == f"machine:{name}" and topo.warnings == ()
    assert all(g.memory_gb > 0 and g.name != "unknown GPU" for g in topo.gpus)


def test_reference_machine_facts():
    assert len(load_machine("hgx-h200-8").gpus) == 8 and load_machine("hgx-h200-8").gpu(0).memory_gb == 150.75
    assert load_machine("h200-nvl-8").gpu(0).name == "NVIDIA H200 NVL"
    l40s = load_machine("pcie-l40s-8")
    assert l40s.gpu(0).memory_gb == 48.0 and {g.numa for g in l40s.gpus} == {0, 1}
    assert all(link.kind != "NV" for link in l40s.links.values())
    assert load_machine("rtx4090-2").gpu(1).memory_gb == 24.0
    sxm = load_machine("h200-sxm-2")
    assert sxm.pcie_gen == 5 and sxm.gpu(0).nvlink_total == 18


def test_measured_machine_ships_the_real_capture():
    shipped = Path(__file__).parents[1] / "generator" / "machines" / "h200-sxm-2.txt"
    assert shipped.read_bytes() == (FIX / "h200-sxm-2x-nvswitch.topo-m.txt").read_bytes()


def test_unknown_machine_name():
    with pytest.raises(UserError, match="unknown machine 'dgx-9000'"):
        load_topology(machine="dgx-9000")


def test_file_and_machine_together_is_an_error():
    with pytest.raises(UserError, match="not both"):
        load_topology(topo_file="x", machine="h200-sxm-2")


def test_topo_file_with_sidecar(tmp_path):
    (tmp_path / "box.txt").write_text(read("a100-pcie-4x-nv12-pairs.txt"))
    (tmp_path / "box.json").write_text(json.dumps({"gpu_name": "NVIDIA A100 80GB PCIe", "memory_gb": 85.9}))
    topo = load_topology(topo_file=str(tmp_path / "box.txt"))
    assert topo.gpu(0).name == "NVIDIA A100 80GB PCIe" and topo.gpu(0).memory_gb == 85.9
    assert topo.pcie_gen == 4 and topo.gpu(0).nvlink_total == 12  # from the name table
    assert not any("memory" in w or "assumed" in w for w in topo.warnings)


@pytest.mark.parametrize(
    "sidecar,needle",
    [
        ("[1, 2]", "expected a JSON object"),
        ('{"gpu": 1}', "unknown key 'gpu'"),
        ('{"memory_gb": "80"}', "wrong type"),
        ('{"memory_gb": -1}', "positive"),
        ("{oops", "not valid JSON"),
    ],
)
def test_bad_sidecar(tmp_path, sidecar, needle):
    (tmp_path / "box.txt").write_text(read("single-gpu.txt"))
    (tmp_path / "box.txt.json").write_text(sidecar)
    with pytest.raises(UserError, match=needle):
        load_topology(topo_file=str(tmp_path / "box.txt"))


def test_topo_file_without_sidecar_warns_memory_unknown(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text(read("h200-nvl-8-two-groups.txt"))
    topo = load_topology(topo_file=str(path))
    assert topo.source == f"file:{path}" and topo.gpu(0).memory_gb == 0.0
    assert any("memory unknown" in w for w in topo.warnings)


def test_topo_file_errors_name_the_file(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_topology(topo_file=str(tmp_path / "missing.txt"))
    with pytest.raises(UserError, match="binary"):
        load_topology(topo_file=str(FIX / "bad-binary.bin"))
    with pytest.raises(UserError, match=r"topology file '.*bad-asymmetric.txt': matrix is not symmetric"):
        load_topology(topo_file=str(FIX / "bad-asymmetric.txt"))


def test_stdin(monkeypatch):
    data = (FIX / "h200-sxm-2x-nvswitch.topo-m.txt").read_bytes()
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(data)))
    topo = load_topology(topo_file="-")
    assert topo.source == "file:-" and topo.link(0, 1).nvlinks == 18


def test_shared_cli_args():
    parser = argparse.ArgumentParser()
    add_topology_args(parser)
    args = parser.parse_args(["--machine", "h200-nvl-8", "--exclude", "0,3,5-6"])
    assert args.exclude == (0, 3, 5, 6)
    assert len(topology_from_args(args).gpus) == 8
    assert parser.parse_args([]).exclude == ()
    for bad in (
        ["--exclude", "a"],
        ["--exclude", "3-1"],
        ["--machine", "nope"],
        ["--machine", "h200-nvl-8", "--topo-file", "y"],
    ):
        with pytest.raises(SystemExit) as err:
            parser.parse_args(bad)
        assert err.value.code == 2


class FakeNvml:
    """Just enough of pynvml: GPUs 0,1 on an NVSwitch (18 links each), GPUs 2,3 joined by 4 direct links,
    GPU 3 with P2P refused by the driver. Every call may be made to raise to test the guards.

    The real reader was run once on the lent 2x H200 SXM machine (2026-11-30, driver 580): it returned NV18 over
    the NVSwitch, 150.75 GB, NUMA 0, CPUs 0-31, PCIe Gen5 and P2P OK for both GPUs, matching the nvidia-smi
    capture; GPUs 0,1 here mimic that answer."""

    NVML_NVLINK_MAX_LINKS = 18

    def __init__(self, count=4, broken=()):
        self.count, self.broken = count, set(broken)
        self.bus = [f"00000000:{0x18 + 0x10 * i:02X}:00.0" for i in range(count)]
        self.shut = False

    def _maybe_fail(self, name):
        if name in self.broken:
            raise RuntimeError(f"{name} not supported")

    def nvmlInit(self):
        self._maybe_fail("nvmlInit")

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        self._maybe_fail("name")
        return b"NVIDIA H200" if h < 2 else "NVIDIA H200"

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=143771 * 1024 * 1024)

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self.bus[h])

    def nvmlDeviceGetNumaNodeId(self, h):
        self._maybe_fail("numa")
        return 0 if h < 2 else 1

    def nvmlDeviceGetMemoryAffinity(self, h, size, scope):
        return [0b10]

    def nvmlDeviceGetCpuAffinity(self, h, size):
        return [0xFFFF if h < 2 else 0xFFFF0000] + [0] * (size - 1)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetNvLinkState(self, h, link):
        if h < 2 or link < 4:
            return 1
        raise RuntimeError("NVMLError_NotSupported")

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        self._maybe_fail("remote")
        if h < 2:
            return SimpleNamespace(busId=f"0000:{0xC0 + link % 4:02x}:00.0")  # an NVSwitch
        return SimpleNamespace(busId=self.bus[5 - h].replace("00000000", "0000").lower())

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):
        return 2 if h < 2 else 0

    def nvmlDeviceGetP2PStatus(self, a, b, index):
        return 2 if 3 in (a, b) else 0

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        self._maybe_fail("ancestor")
        return {frozenset((0, 1)): 10, frozenset((2, 3)): 20}.get(frozenset((a, b)), 50)


def test_nvml_reader_builds_the_topology():
    fake = FakeNvml()
    topo = detect.detect_live(nvml_module=fake)
    assert topo.source == "nvml" and fake.shut
    assert [g.name for g in topo.gpus] == ["NVIDIA H200"] * 4
    assert topo.gpu(0).memory_gb == 150.75 and topo.gpu(0).pci_bus_id == "00000000:18:00.0"
    assert [g.numa for g in topo.gpus] == [0, 0, 1, 1]
    assert topo.gpu(0).cpu_affinity == "0-15" and topo.gpu(2).cpu_affinity == "16-31"
    assert topo.gpu(0).nvlink_total == 18 and topo.gpu(2).nvlink_total == 4
    assert (topo.link(0, 1).kind, topo.link(0, 1).nvlinks) == ("NV", 18)
    assert (topo.link(2, 3).kind, topo.link(2, 3).nvlinks) == ("NV", 4)
    assert topo.link(0, 2).kind == "SYS" and topo.link(0, 2).p2p is True
    assert topo.link(1, 3).p2p is False
    assert topo.pcie_gen == 5


def test_nvml_missing_numa_falls_back_to_memory_affinity():
    topo = detect.detect_live(nvml_module=FakeNvml(broken={"numa"}))
    assert [g.numa for g in topo.gpus] == [1, 1, 1, 1]


def test_nvml_without_paths_falls_back_to_nvidia_smi(monkeypatch):
    monkeypatch.setattr(detect, "run_nvidia_smi", lambda timeout_s: (read("a100-pcie-4x-nv12-pairs.txt"), ""))
    topo = detect.detect_live(nvml_module=FakeNvml(broken={"ancestor"}))
    assert topo.source == "nvidia-smi"
    assert topo.gpu(0).name == "NVIDIA H200" and topo.gpu(0).memory_gb == 150.75  # facts still from NVML
    assert topo.link(0, 1).nvlinks == 12  # links from the text
    assert not any("memory unknown" in w for w in topo.warnings)
    assert any("NVML could not describe every link" in w for w in topo.warnings)


def test_nvml_gaps_and_no_nvidia_smi_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(detect, "run_nvidia_smi", lambda timeout_s: (None, "nvidia-smi not found"))
    with pytest.raises(UserError, match="NVML sees 4 GPU"):
        detect.detect_live(nvml_module=FakeNvml(broken={"ancestor"}))


def test_no_gpu_uses_default_machine_and_says_so(monkeypatch):
    monkeypatch.setattr(detect, "run_nvidia_smi", lambda timeout_s: (None, "nvidia-smi not found"))
    topo = detect.detect_live(nvml_module=FakeNvml(broken={"nvmlInit"}))
    assert topo.source == f"machine:{DEFAULT_MACHINE}"
    assert "no NVIDIA GPU detected" in topo.warnings[0] and "nvidia-smi not found" in topo.warnings[0]
    topo = detect.detect_live(nvml_module=FakeNvml(count=0))
    assert "NVML sees no GPU" in topo.warnings[0]


def test_load_topology_without_arguments_never_fails_silently():
    topo = load_topology()  # this CI box has no GPU; a real GPU box returns its own topology
    assert topo.source in ("nvml", "nvidia-smi") or "no NVIDIA GPU detected" in topo.warnings[0]


def _fake_smi(tmp_path: Path, body: str) -> None:
    exe = tmp_path / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)


def test_hung_nvidia_smi_times_out(tmp_path, monkeypatch):
    _fake_smi(tmp_path, "exec sleep 30\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    text, why = detect.run_nvidia_smi(timeout_s=0.5)
    assert text is None and "did not answer within 0.5 s" in why
    topo = detect.detect_live(nvml_module=FakeNvml(broken={"nvmlInit"}), timeout_s=0.5)
    assert "did not answer" in topo.warnings[0]


def test_failing_and_working_nvidia_smi(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    _fake_smi(tmp_path, f"cat '{FIX / 'bad-smi-error.txt'}'\nexit 9\n")
    text, why = detect.run_nvidia_smi()
    assert text is None and "NVIDIA-SMI has failed" in why
    _fake_smi(tmp_path, f"cat '{FIX / 'hgx-8x-nvswitch-nics.txt'}'\n")
    topo = detect.detect_live(nvml_module=FakeNvml(broken={"nvmlInit"}))
    assert topo.source == "nvidia-smi" and len(topo.gpus) == 8


def test_cpu_list_ranges():
    assert cpu_list([0b1011, 0]) == "0-1,3"
    assert cpu_list([0, 1]) == "64"
    assert cpu_list(None) is None


NVML_CALLS = [
    name for name in dir(FakeNvml) if name.startswith("nvmlDevice") and name != "nvmlDeviceGetHandleByIndex"
] + ["nvmlDeviceGetHandleByIndex", "nvmlDeviceGetCount"]


@pytest.mark.parametrize("broken", NVML_CALLS)
@pytest.mark.parametrize("failure", [RuntimeError("NVMLError_NotSupported"), AttributeError("old driver")])
def test_every_nvml_call_is_guarded(monkeypatch, broken, failure):
    """Any single NVML call failing (or missing) ends in a topology or one UserError, never a crash."""
    fake = FakeNvml()

    def fail(*args):
        raise failure

    monkeypatch.setattr(fake, broken, fail)
    monkeypatch.setattr(detect, "run_nvidia_smi", lambda timeout_s: (read("single-gpu.txt"), ""))
    try:
        topo = detect.detect_live(nvml_module=fake)
    except UserError as exc:
        assert "\n" not in str(exc)
        return
    assert topo.gpus and all(g.memory_gb >= 0 for g in topo.gpus)


def test_gpu_flag_over_the_no_gpu_fallback_takes_the_named_parts_memory(monkeypatch):
    # A laptop planning for H100s: the reference machine's H200 memory must not come along with the new name.
    monkeypatch.setattr(detect, "run_nvidia_smi", lambda timeout_s: (None, "nvidia-smi not found"))
    monkeypatch.setattr(detect, "_read_nvml", lambda nvml_module: (None, "NVML did not start"))
    h200 = load_topology()
    h100 = load_topology(gpu="H100")
    assert h200.gpu(0).memory_gb == 150.75 and h100.gpu(0).name == "H100"
    assert 0 < h100.gpu(0).memory_gb < 100 and any("taken as H100" in w for w in h100.warnings)
    assert load_topology(gpu="H100", gpu_memory_gb=94).gpu(0).memory_gb == 94
    # The same part under another spelling is not a rename: the memory read stays.
    same = load_topology(gpu="NVIDIA H200")
    assert same.gpu(0).memory_gb == 150.75 and not any("taken as" in w for w in same.warnings)
    # A part the catalog lacks has no memory to take: the user is asked for it rather than handed the H200's.
    with pytest.raises(UserError, match="--gpu-memory-gb"):
        load_topology(gpu="Acme Matrix 9000")
    assert load_topology(gpu="Acme Matrix 9000", gpu_memory_gb=32).gpu(0).memory_gb == 32


def test_gpu_flag_naming_another_part_than_the_sidecar_drops_the_sidecars_memory(tmp_path):
    (tmp_path / "box.txt").write_text(read("single-gpu.txt"))
    (tmp_path / "box.json").write_text(json.dumps({"gpu_name": "NVIDIA A100 80GB PCIe", "memory_gb": 85.9}))
    assert load_topology(topo_file=str(tmp_path / "box.txt")).gpu(0).memory_gb == 85.9
    l40s = load_topology(topo_file=str(tmp_path / "box.txt"), gpu="L40S")
    assert l40s.gpu(0).name == "L40S" and l40s.gpu(0).memory_gb < 60
    assert load_topology(topo_file=str(tmp_path / "box.txt"), gpu="L40S", gpu_memory_gb=46).gpu(0).memory_gb == 46
