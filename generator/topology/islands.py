"""NVLink islands: which GPUs reach each other over NVLink, and whether an island is switched or a bridged mesh."""

from __future__ import annotations

from collections.abc import Sequence

from generator.topology.types import Topology

# Most links any GPU generation has had (NVLink4/5: 18); a mesh cannot give 3+ peers more than this in total.
MAX_LINKS_PER_GPU = 18


def islands(topo: Topology) -> list[list[int]]:
    """Connected components of the NVLink graph, each sorted, ordered by smallest member; singletons included."""
    left = set(topo.indices)
    out: list[list[int]] = []
    while left:
        start = min(left)
        left.discard(start)
        comp, stack = [start], [start]
        while stack:
            a = stack.pop()
            for b in sorted(left):
                if topo.link(a, b).kind == "NV":
                    left.discard(b)
                    comp.append(b)
                    stack.append(b)
        out.append(sorted(comp))
    return sorted(out)


def island_of(topo: Topology, gpu: int) -> list[int]:
    """The NVLink island holding `gpu` (KeyError for an id the machine does not have)."""
    for island in islands(topo):
        if gpu in island:
            return island
    raise KeyError(gpu)


def is_clique(topo: Topology, island: Sequence[int]) -> bool:
    """True when every pair inside `island` has a direct NVLink (NVSwitch, or a fully bridged group)."""
    ids = sorted(island)
    return all(topo.link(a, b).kind == "NV" for x, a in enumerate(ids) for b in ids[x + 1 :])


def is_switched(topo: Topology, island: Sequence[int]) -> bool:
    """True when the island hangs off an NVSwitch: every pair shows the same NV# and that count is the GPU's whole
    link budget, which a point-to-point mesh of 3+ GPUs cannot do. Two GPUs: a direct bridge and a switch behave the
    same, so this answers True when the pair's NV# equals the GPU's known link total."""
    ids = sorted(island)
    if len(ids) < 2 or not is_clique(topo, ids):
        return False
    counts = {topo.link(a, b).nvlinks for x, a in enumerate(ids) for b in ids[x + 1 :]}
    if len(counts) != 1:
        return False
    (count,) = counts
    totals = [topo.gpu(g).nvlink_total for g in ids]
    if all(t and count == t for t in totals):
        return True
    budget = max((t for t in totals if t), default=MAX_LINKS_PER_GPU)
    return len(ids) >= 3 and count * (len(ids) - 1) > budget
