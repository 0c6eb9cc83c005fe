"""Which k GPUs to use, and in what rank order for HSDP."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations

from generator.errors import UserError
from generator.topology.bandwidth import model_for
from generator.topology.islands import is_switched, islands
from generator.topology.types import Topology

EXHAUSTIVE_LIMIT = 20_000  # C(16, 8) = 12,870 subsets: every 16-GPU question is answered exactly


@dataclass(frozen=True)
class Selection:
    gpu_ids: tuple[int, ...]
    """Chosen GPUs, sorted, PCI order."""
    busbw_gbps: float
    """Predicted all-reduce bus bandwidth of the subset (math.inf for a single GPU: nothing moves)."""
    spans_islands: bool
    """True when the GPUs are not all in one NVLink island (always True for k >= 2 without NVLink)."""
    reason: str
    """Plain words: why this subset and what the alternative would cost."""


def _fmt(ids: Iterable[int]) -> str:
    return ",".join(map(str, ids))


class _Scorer:
    def __init__(self, topo: Topology):
        self.topo = topo
        self.model = model_for(topo)
        self.numa = [g.numa for g in topo.gpus]
        self.island = {}
        for x, island in enumerate(islands(topo)):
            for g in island:
                self.island[self.model.pos[g]] = x

    def bottleneck(self, members: tuple[int, ...]) -> float:
        return round(self.model.busbw(list(members)), 6)

    def score(self, members: tuple[int, ...], bottleneck: float | None = None) -> tuple:
        """Bottleneck first, then total link quality, then NUMA locality (fewer nodes, more same-node pairs)."""
        bw = self.model.bw
        pairs = [bw[a][b] for x, a in enumerate(members) for b in members[x + 1 :]]
        nodes = {self.numa[a] for a in members}
        same = sum(1 for x, a in enumerate(members) for b in members[x + 1 :] if self.numa[a] == self.numa[b])
        if bottleneck is None:
            bottleneck = self.bottleneck(members)
        return (bottleneck, round(min(pairs, default=0.0), 6), round(sum(pairs), 6), -len(nodes), same)

    def spans(self, members: Sequence[int]) -> bool:
        return len({self.island[a] for a in members}) > 1


def _twin_classes(avail: list[int], scorer: _Scorer) -> list[list[int]]:
    """GPUs that are interchangeable (same links to every other GPU, same NUMA node, same link budget): any
    subset scores the same with either, so only the lowest-numbered members of a class need trying."""
    m = scorer.model

    def twins(a: int, b: int) -> bool:
        if (scorer.numa[a], m.switched[a], m.cap[a], m.per_link[a]) != (
            scorer.numa[b],
            m.switched[b],
            m.cap[b],
            m.per_link[b],
        ):
            return False
        others = [c for c in range(len(m.ids)) if c not in (a, b)]
        return all(m.bw[a][c] == m.bw[b][c] and m.nv[a][c] == m.nv[b][c] for c in others)

    classes: list[list[int]] = []
    for a in avail:
        for cls in classes:
            if all(twins(a, b) for b in cls):
                cls.append(a)
                break
        else:
            classes.append([a])
    return classes


def _counts(sizes: list[int], k: int) -> Iterable[tuple[int, ...]]:
    """Every way to take k GPUs as a count per class, in an order that keeps the lowest ids first."""
    if not sizes:
        if k == 0:
            yield ()
        return
    for take in range(min(sizes[0], k), -1, -1):
        if k - take <= sum(sizes[1:]):
            for rest in _counts(sizes[1:], k - take):
                yield (take, *rest)


def _candidates(avail: list[int], k: int, scorer: _Scorer) -> Iterable[tuple[int, ...]]:
    classes = _twin_classes(avail, scorer)
    if len(classes) < len(avail) and math.prod(len(c) + 1 for c in classes) <= EXHAUSTIVE_LIMIT:
        for counts in _counts([len(c) for c in classes], k):
            yield tuple(sorted(a for cls, take in zip(classes, counts, strict=False) for a in cls[:take]))
        return
    if math.comb(len(avail), k) <= EXHAUSTIVE_LIMIT:
        yield from combinations(avail, k)
        return
    # Too many to enumerate: grow a set greedily from every starting GPU.
    for start in avail:
        chosen = [start]
        while len(chosen) < k:
            rest = [a for a in avail if a not in chosen]
            chosen.append(max(rest, key=lambda a: (scorer.score(tuple(sorted([*chosen, a]))), -a)))
        yield tuple(sorted(chosen))


def _slowest_kind(topo: Topology, ids: Sequence[int], gbps: float) -> str:
    """Name the path kind that sets a spanning subset's bottleneck ("SYS", "NODE"...)."""
    paths = [topo.link(a, b) for x, a in enumerate(ids) for b in ids[x + 1 :] if topo.link(a, b).kind != "NV"]
    near = [p for p in paths if p.busbw_gbps <= gbps + 0.05]
    return max(near or paths, key=lambda p: p.busbw_gbps).kind if paths else "NV"


def check_exclude(topo: Topology, exclude: Sequence[int]) -> None:
    bad = sorted(set(exclude) - set(topo.indices))
    if bad:
        have = _fmt(topo.indices)
        raise UserError(f"--exclude names GPU {_fmt(bad)}, which this machine does not have (GPUs {have})")


def best_subset(topo: Topology, k: int, exclude: Sequence[int] = ()) -> Selection:
    """The k GPUs (not in `exclude`) with the best predicted all-reduce: exhaustive up to C(n, k) = 20,000."""
    check_exclude(topo, exclude)
    known = set(topo.indices)
    avail_ids = [g for g in topo.indices if g not in set(exclude)]
    if not isinstance(k, int) or k < 1:
        raise UserError(f"number of GPUs must be a positive whole number, got {k!r}")
    if k > len(avail_ids):
        excluded = f" after excluding {_fmt(sorted(set(exclude)))}" if exclude else ""
        raise UserError(
            f"asked for {k} GPUs but only {len(avail_ids)} are available{excluded} "
            f"(this machine has {len(known)}); ask for fewer GPUs or free some"
        )
    scorer = _Scorer(topo)
    pos = scorer.model.pos
    avail = [pos[g] for g in avail_ids]
    best = best_in = best_across = None
    for members in _candidates(avail, k, scorer):
        spans = scorer.spans(members)
        rival = best_across if spans else best_in
        bottleneck = scorer.bottleneck(members)
        if rival is not None and bottleneck < rival[0][0][0]:
            continue  # cannot beat the best of its kind: skip the slower tie-break terms
        s = (scorer.score(members, bottleneck), tuple(-a for a in members))  # ties: lowest ids win
        if best is None or s > best[0]:
            best = (s, members)
        if spans:
            if best_across is None or s > best_across[0]:
                best_across = (s, members)
        elif best_in is None or s > best_in[0]:
            best_in = (s, members)
    ids = tuple(scorer.model.ids[a] for a in best[1])
    gbps = best[0][0][0]
    spans = scorer.spans(best[1])
    reason = _reason(topo, scorer, ids, gbps, spans, best_across, avail)
    return Selection(ids, round(gbps, 1) if math.isfinite(gbps) else gbps, spans, reason)


def _reason(topo, scorer, ids, gbps, spans, best_across, avail) -> str:
    k = len(ids)
    if k == 1:
        return f"one GPU moves no gradients between GPUs; GPU {ids[0]} is the first free one in PCI order"
    model = scorer.model
    free_islands = [[g for g in isl if model.pos[g] in avail] for isl in islands(topo)]
    free_islands = [isl for isl in free_islands if isl]
    largest = max(free_islands, key=len)
    if not spans:
        island = next(isl for isl in free_islands if set(ids) <= set(isl))
        kind = "NVSwitch" if is_switched(topo, island) else "bridged NVLink"
        text = f"GPUs {_fmt(ids)} share one NVLink island ({kind}): predicted bus bandwidth {gbps:.0f} GB/s."
        if len(island) == 2:  # a pair looks the same over a switch or a bridge: name only the link count
            pair = f"NV{topo.link(*ids).nvlinks}"
            text = f"GPUs {_fmt(ids)} are joined by {pair}: predicted bus bandwidth {gbps:.0f} GB/s."
        if kind == "bridged NVLink" and k < len(island):
            used = min(sum(topo.link(a, b).nvlinks for b in ids if b != a) for a in ids)
            whole = model.busbw([model.pos[g] for g in island])
            text += (
                f" Bridges are point to point, so {k} GPUs use only {used} of each GPU's "
                f"{topo.gpu(ids[0]).nvlink_total or '?'} links; all {len(island)} GPUs of the island would reach "
                f"{whole:.0f} GB/s."
            )
        if best_across is not None:
            alt = best_across[0][0][0]
            alt_ids = [model.ids[a] for a in best_across[1]]
            slow = _slowest_kind(topo, alt_ids, alt)
            text += (
                f" Spreading over islands (e.g. GPUs {_fmt(alt_ids)}) would cross a {slow} path: {alt:.0f} GB/s, "
                f"{gbps / alt:.1f}x slower."
            )
        return text
    slow = _slowest_kind(topo, ids, gbps)
    if len(largest) < 2:
        numa = {topo.gpu(g).numa for g in ids}
        where = f" and all sit on NUMA node {numa.pop()}" if len(numa) == 1 and None not in numa else ""
        host = any(topo.link(a, b).p2p is False for x, a in enumerate(ids) for b in ids[x + 1 :])
        via = " Peer-to-peer is off on these GPUs, so NCCL copies through host memory." if host else ""
        return (
            f"no NVLink between the free GPUs: every byte crosses PCIe. GPUs {_fmt(ids)} have the best slowest "
            f"path ({slow}, predicted {gbps:.0f} GB/s){where}.{via}"
        )
    inside = model.busbw([model.pos[g] for g in largest])
    why = (
        f"{k} GPUs do not fit in one NVLink island (the largest free one has {len(largest)})"
        if k > len(largest)
        else f"no single NVLink island holds {k} free GPUs with a better ring"
    )
    ratio = f" ({inside / gbps:.1f}x less)" if gbps > 0 and math.isfinite(inside) else ""
    return (
        f"WARNING: the job spans NVLink islands. {why}, so the ring crosses a {slow} path: predicted bus bandwidth "
        f"{gbps:.0f} GB/s against {inside:.0f} GB/s inside one island of {len(largest)}{ratio}. Use "
        f"{len(largest)} GPUs, or HSDP with one shard group per island so the heavy traffic stays on NVLink."
    )


def order_for_hsdp(topo: Topology, gpu_ids: Sequence[int]) -> tuple[tuple[int, ...], int]:
    """Rank order that makes each NVLink island a contiguous block, and the HSDP shard-group size.

    The shard group is the island size inside the selection. When the selection holds unequal parts of islands
    (4 GPUs of one, 2 of another), the shard size is the gcd of the part sizes (2 here): blocks stay contiguous and
    every shard group still lies inside one island. A gcd of 1 (e.g. PCIe-only, or parts of 3 and 2) means no shard
    group can stay on NVLink, so HSDP degenerates to plain replication.
    """
    chosen = sorted(set(gpu_ids))
    missing = [g for g in chosen if g not in topo.indices]
    if missing:
        raise UserError(f"GPU {_fmt(missing)} is not on this machine (GPUs {_fmt(topo.indices)})")
    if not chosen:
        raise UserError("no GPUs given to order")
    parts = [[g for g in island if g in chosen] for island in islands(topo)]
    parts = [p for p in parts if p]
    ordered = tuple(g for p in parts for g in p)
    return ordered, math.gcd(*(len(p) for p in parts))
