"""Which GPU subsets are worth measuring: each NVLink island, each pair (a sample beyond 8 GPUs), the best subset of
each size, and one subset spanning islands. Pure over a Topology; None (no topology, e.g. CPU) gives pairs + all."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

MAX_ALL_PAIRS_GPUS = 8
MAX_SAMPLED_PAIRS = 16


@dataclass(frozen=True)
class Subset:
    gpu_ids: tuple[int, ...]
    """GPUs in rank order (PCI-order indices)."""
    reasons: tuple[str, ...]
    """Why it is measured: "island 0", "pair", "best 4", "spans islands", "all"."""

    @property
    def key(self) -> str:
        return ",".join(map(str, self.gpu_ids))


def _pairs(gpus: list[int], islands: list[list[int]], quick: bool) -> list[tuple[int, int]]:
    every = list(combinations(gpus, 2))
    if not quick and len(gpus) <= MAX_ALL_PAIRS_GPUS:
        return every
    # One pair inside each island, then pairs across islands, then neighbours: each kind of path at least once.
    chosen = [tuple(i[:2]) for i in islands if len(i) >= 2]
    chosen += [(a[0], b[0]) for a, b in combinations([i for i in islands if i], 2)]
    chosen += [(a, b) for a, b in zip(gpus, gpus[1:], strict=False)]
    out, limit = [], 2 if quick else MAX_SAMPLED_PAIRS
    for pair in chosen:
        if pair not in out and len(out) < max(limit, len(islands)):
            out.append(pair)
    return out


def choose_subsets(gpus: list[int], topo=None, quick: bool = False) -> list[Subset]:
    """Subsets of `gpus` to measure, smallest first, each once (with every reason that picked it)."""
    gpus = sorted(set(gpus))
    reasons: dict[tuple[int, ...], list[str]] = {}

    def add(ids, why: str) -> None:
        ids = tuple(ids)
        if len(ids) >= 2:
            reasons.setdefault(ids, []).append(why)

    islands: list[list[int]] = []
    if topo is not None:
        from generator.topology import best_subset
        from generator.topology import islands as find_islands

        chosen = set(gpus)
        islands = [[g for g in isl if g in chosen] for isl in find_islands(topo)]
        islands = [i for i in islands if i]
        for n, isl in enumerate(islands):
            add(isl, f"island {n}")
        exclude = tuple(g for g in topo.indices if g not in chosen)
        sizes = range(2, len(gpus) + 1) if not quick else sorted({2, len(gpus)})
        for k in sizes:
            sel = best_subset(topo, k, exclude=exclude)
            add(sorted(sel.gpu_ids), f"best {k}")
        if len(islands) > 1:
            add(sorted(islands[0] + islands[1]), "spans islands")
    for pair in _pairs(gpus, islands or [gpus], quick):
        add(pair, "pair")
    add(gpus, "all")
    return [Subset(ids, tuple(why)) for ids, why in sorted(reasons.items(), key=lambda kv: (len(kv[0]), kv[0]))]
