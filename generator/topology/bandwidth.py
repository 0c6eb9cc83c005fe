"""Expected all-reduce bus bandwidth (nccl-tests definition) for a GPU pair and for any GPU subset.

All numbers here are predictions from line rates times an efficiency fitted to a few real points:
- measured, 2x H200 SXM over NVSwitch (NV18), 2 GB bf16 all-reduce: 338.6 GB/s busbw; with NCCL_P2P_DISABLE=1
  (host shared memory): 28.2-28.6 GB/s (../shared/topo/README.md, captured 2026-11-30);
- published, 8x H200 NVL (two NVLink groups of four, bridges): 4 GPUs in a group ~322 GB/s, 2 GPUs in a group
  ~114 GB/s, 4 GPUs over two groups ~35 GB/s (figures quoted by the project brief; kubernetes.recipes "H200 NVL4
  topology bandwidth tiers" reports ~337 / ~50 / ~35 GB/s for the same tiers).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from generator.errors import UserError
from generator.topology.islands import is_switched, islands
from generator.topology.types import Topology

# One direction, one link. NVLink2 (V100) 25 GB/s: 6 links = 300 GB/s both ways (V100 datasheet). NVLink3 (A100)
# 25 GB/s: 12 links = 600 GB/s (A100 datasheet). NVLink4 (H100/H200) 25 GB/s: 18 links = 900 GB/s (H100/H200
# datasheets; nvidia-smi nvlink --status on the captured H200 shows 26.562 GB/s per link incl. encoding headroom;
# nccl-tests#149: 25 GB/s per direction). NVLink5 (B200) 50 GB/s: 18 links = 1.8 TB/s (B200 datasheet).
NVLINK_GBPS_PER_LINK = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}

# One direction of an x16 link after 128b/130b encoding (PCI-SIG: Gen3 8 GT/s, Gen4 16 GT/s, Gen5 32 GT/s, Gen6 64).
PCIE_X16_GBPS = {3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}

# NVLink busbw / line rate. Fitted: 338.6 GB/s measured on NV18 (450 GB/s line) = 0.753. The same factor gives the
# published ~114 GB/s for a 6-link H200 NVL pair (6 x 25 x 0.753 = 113).
NVLINK_EFFICIENCY = 338.6 / 450.0
# A ring over a bridged mesh (no switch) of 3+ GPUs splits NCCL channels over several peers; fitted to the
# published ~322 GB/s for 4 H200 NVL in one group (18 links in use, 339 GB/s at NVLINK_EFFICIENCY).
MESH_EFFICIENCY = 322.0 / 339.0

# PCIe P2P busbw / x16 line rate per path kind. SYS fitted to ~35 GB/s across H200 NVL groups on Gen5 (35 / 63).
# The shorter paths follow public P2P measurements: ~54-56 GB/s same-switch and 39-51 GB/s cross-NUMA on Gen5 x16
# (p2pBandwidthLatencyTest, RTX PRO 6000 systems), and nccl#1639's 28-35 GB/s all-reduce on PCIe-switch boxes.
PCIE_PATH_EFFICIENCY = {"PIX": 0.80, "PXB": 0.76, "PHB": 0.70, "NODE": 0.64, "SYS": 35.0 / 63.0}
# No peer-to-peer (NCCL_P2P_DISABLE=1 or GeForce cards): data bounces through host memory. Fitted: 28.6 GB/s
# measured on the Gen5 H200 pair.
HOST_PATH_EFFICIENCY = 28.6 / 63.0

DEFAULT_PCIE_GEN = 4


def nvlink_pair_gbps(nvlinks: int, nvlink_gen: int | None) -> float:
    """Predicted 2-GPU all-reduce busbw over `nvlinks` bonded links."""
    rate = NVLINK_GBPS_PER_LINK.get(nvlink_gen or 4, NVLINK_GBPS_PER_LINK[4])
    return nvlinks * rate * NVLINK_EFFICIENCY


def pcie_path_gbps(kind: str, pcie_gen: int | None, p2p: bool | None = True) -> float:
    """Predicted 2-GPU all-reduce busbw over a PCIe path of `kind`; host-memory rate when P2P is off."""
    line = PCIE_X16_GBPS.get(pcie_gen or DEFAULT_PCIE_GEN, PCIE_X16_GBPS[DEFAULT_PCIE_GEN])
    if p2p is False:
        return line * HOST_PATH_EFFICIENCY
    return line * PCIE_PATH_EFFICIENCY[kind]


def host_path_busbw_gbps(topo: Topology) -> float:
    """What any subset gets when NCCL is kept off peer-to-peer (NCCL_P2P_DISABLE=1): the host-memory path."""
    return pcie_path_gbps("SYS", topo.pcie_gen, p2p=False)


_RECENT: list = []
"""(topology, its BandwidthModel) pairs, newest first: a plan asks for the wire of many subsets of one machine."""


def model_for(topo: Topology) -> BandwidthModel:
    """This topology object's BandwidthModel, built once (a Topology is frozen, so its tables never go stale)."""
    for seen, model in _RECENT:
        if seen is topo:
            return model
    model = BandwidthModel(topo)
    _RECENT[:] = [(topo, model), *_RECENT[:7]]
    return model


class BandwidthModel:
    """Per-topology tables so that thousands of subsets can be scored quickly (best_subset enumerates them)."""

    def __init__(self, topo: Topology):
        self.ids = topo.indices
        n = len(self.ids)
        self.pos = {g: p for p, g in enumerate(self.ids)}
        self.bw = [[0.0] * n for _ in range(n)]
        self.nv = [[0] * n for _ in range(n)]
        for (i, j), link in topo.links.items():
            a, b = self.pos[i], self.pos[j]
            self.bw[a][b] = self.bw[b][a] = link.busbw_gbps
            if link.kind == "NV":
                self.nv[a][b] = self.nv[b][a] = link.nvlinks
        # Effective busbw per link for each GPU (same on every link of one GPU in practice; min is the safe pick).
        self.per_link = [
            min((self.bw[a][b] / self.nv[a][b] for b in range(n) if self.nv[a][b]), default=0.0) for a in range(n)
        ]
        self.nv_mask = [sum(1 << b for b in range(n) if self.nv[a][b]) for a in range(n)]
        # Per distinct PCIe rate (fastest first): who reaches whom over NVLink or a path at least that fast.
        pcie = {self.bw[a][b] for a in range(n) for b in range(n) if a != b and not self.nv[a][b]}
        rates = sorted(pcie, reverse=True)
        self.levels = [
            (r, [self.nv_mask[a] | sum(1 << b for b in range(n) if b != a and self.bw[a][b] >= r) for a in range(n)])
            for r in rates
        ]
        self.cap = [g.nvlink_total or 0 for g in topo.gpus]
        self.switched = [False] * n
        for island in islands(topo):
            if is_switched(topo, island):
                for g in island:
                    self.switched[self.pos[g]] = True
        self.switched_mask = sum(1 << a for a in range(n) if self.switched[a])
        # Per GPU, per byte of a subset mask: NVLink links and peers inside that byte (256 entries per byte).
        self.byte_tables = [[self._byte_table(a, c) for c in range((n + 7) // 8)] for a in range(n)]

    def _byte_table(self, a: int, chunk: int) -> tuple[list[int], list[int]]:
        peers = [self.nv[a][8 * chunk + b] if 8 * chunk + b < len(self.ids) else 0 for b in range(8)]
        links = [sum(peers[b] for b in range(8) if byte >> b & 1) for byte in range(256)]
        degree = [sum(1 for b in range(8) if byte >> b & 1 and peers[b]) for byte in range(256)]
        return links, degree

    def positions(self, gpu_ids: Sequence[int]) -> list[int]:
        out = []
        for g in sorted(set(gpu_ids)):
            if g not in self.pos:
                raise UserError(f"GPU {g} is not on this machine (GPUs: {', '.join(map(str, self.ids))})")
            out.append(self.pos[g])
        return out

    def busbw(self, members: list[int]) -> float:
        """Ring bottleneck over positions `members` (sorted, unique). math.inf for fewer than two GPUs."""
        if len(members) < 2:
            return math.inf
        mask = 0
        for a in members:
            mask |= 1 << a
        best = math.inf
        comps = 0
        left = mask
        while left:
            comp = self._reach(left & -left, mask, self.nv_mask)
            left &= ~comp
            comps += 1
            if comp & (comp - 1):  # two or more GPUs
                gbps = self._component_gbps(comp)
                if gbps < best:
                    best = gbps
        if comps > 1:
            best = min(best, self._crossing_gbps(mask))
        return best

    @staticmethod
    def _reach(start: int, mask: int, adjacency: list[int]) -> int:
        """Bitmask of the GPUs in `mask` reachable from `start` over `adjacency`."""
        seen = frontier = start
        while frontier:
            low = frontier & -frontier
            frontier ^= low
            new = adjacency[low.bit_length() - 1] & mask & ~seen
            seen |= new
            frontier |= new
        return seen

    def _component_gbps(self, cmask: int) -> float:
        comp = [a for a in range(cmask.bit_length()) if cmask >> a & 1]
        if len(comp) == 2 or not cmask & ~self.switched_mask:
            # NVSwitch: every pair sees all of each GPU's links, whatever the subset size.
            return min(self.bw[a][b] for a in comp for b in comp if a < b)
        # Bridged mesh / cube-mesh: a GPU's share is the links it has to peers inside the subset.
        worst = math.inf
        for a in comp:
            links = degree = 0
            rest = cmask
            for link_table, peer_table in self.byte_tables[a]:  # inlined _nv_in: this loop is the hot path
                links += link_table[rest & 0xFF]
                degree += peer_table[rest & 0xFF]
                rest >>= 8
            cap = self.cap[a]
            if cap and links > cap:
                links = cap
            gbps = links * self.per_link[a]
            if degree < 2:
                # A ring needs two neighbours; the second one is reached over PCIe.
                gbps = min(gbps, max(self.bw[a][b] for b in comp if b != a and not self.nv[a][b]))
            if gbps < worst:
                worst = gbps
        return worst * MESH_EFFICIENCY

    def _crossing_gbps(self, mask: int) -> float:
        """The slowest hop a ring must take between NVLink components: the highest PCIe rate at which the subset
        is still connected (NVLink inside components, PCIe paths at least that fast between them)."""
        for level, adjacency in self.levels:
            if self._reach(mask & -mask, mask, adjacency) == mask:
                return level
        return 0.0


def subset_busbw_gbps(topo: Topology, gpu_ids: Sequence[int], p2p_disabled: bool = False) -> float:
    """Predicted all-reduce bus bandwidth (GB/s) of one collective over exactly `gpu_ids`.

    The ring is as fast as its slowest hop: inside an NVSwitch island every GPU brings all its links; inside a bridged
    mesh a GPU brings only the links to peers in the subset (2 of 4 H200 NVL GPUs use 6 of 18 links); between
    NVLink components the ring crosses PCIe / host bridges / sockets. One GPU moves nothing: math.inf. With
    `p2p_disabled` (NCCL_P2P_DISABLE=1) everything goes through host memory.
    """
    model = model_for(topo)
    members = model.positions(gpu_ids)
    if p2p_disabled and len(members) >= 2:
        return host_path_busbw_gbps(topo)
    return model.busbw(members)
