"""Which GPUs form each tensor-, context- and FSDP-parallel group of a layout (accelerate 1.15's device mesh).

accelerate builds the mesh in the order dp_replicate, dp_shard, cp, sp, tp (outermost first,
`ParallelismConfig._get_mesh`), so with local ranks ordered as `gpu_ids` a TP group is tp consecutive ranks, a CP
group cp ranks tp apart, and the FSDP group (accelerate's flattened `dp_shard_cp`) every rank sharing a TP position.
Pure: no topology here, only rank arithmetic; the planner checks the groups against the NVLink islands.
"""

from __future__ import annotations

from dataclasses import dataclass

from generator.estimate.parallel import Layout


@dataclass(frozen=True)
class ParallelGroups:
    """A layout placed on GPUs: what the emitter writes and the header describes."""

    layout: Layout
    """Group sizes and the bandwidths they were priced at."""
    gpu_ids: tuple[int, ...]
    """PCI-order GPU ids on each machine in local-rank order (gpu_ids of the YAML)."""
    num_machines: int = 1
    """Machines; TP and CP groups never leave one (ranks are numbered machine by machine)."""

    def _gpu(self, rank: int) -> int:
        return self.gpu_ids[rank % len(self.gpu_ids)]

    def _groups(self, inner: int, stride: int) -> tuple[tuple[int, ...], ...]:
        """Groups of `inner` ranks `stride` apart, over all ranks, as global ranks."""
        total = len(self.gpu_ids) * self.num_machines
        out, seen = [], set()
        for r in range(total):
            if r in seen:
                continue
            g = tuple(r + i * stride for i in range(inner))
            seen.update(g)
            out.append(g)
        return tuple(out)

    @property
    def tp_rank_groups(self) -> tuple[tuple[int, ...], ...]:
        return self._groups(self.layout.tp, 1)

    @property
    def cp_rank_groups(self) -> tuple[tuple[int, ...], ...]:
        tp, cp = self.layout.tp, self.layout.cp
        blocks = self._groups(tp * cp, 1)
        return tuple(tuple(b[t + i * tp] for i in range(cp)) for b in blocks for t in range(tp))

    @property
    def fsdp_rank_groups(self) -> tuple[tuple[int, ...], ...]:
        tp, shard = self.layout.tp, self.layout.dp_shard * self.layout.cp
        total = len(self.gpu_ids) * self.num_machines
        groups = []
        for rep in range(self.layout.dp_replicate):
            base = rep * shard * tp
            groups += [tuple(base + t + i * tp for i in range(shard)) for t in range(tp)]
        return tuple(g for g in groups if all(r < total for r in g))

    def gpus(self, ranks: tuple[int, ...]) -> tuple[int, ...]:
        """Local GPU ids of a group of ranks (TP and CP groups sit on one machine)."""
        return tuple(self._gpu(r) for r in ranks)

    def machines(self, ranks: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(sorted({r // len(self.gpu_ids) for r in ranks}))

    @property
    def tp_groups(self) -> tuple[tuple[int, ...], ...]:
        """TP groups as local GPU ids (the same on every machine)."""
        return _local_unique(self, self.tp_rank_groups) if self.layout.tp > 1 else ()

    @property
    def cp_groups(self) -> tuple[tuple[int, ...], ...]:
        """CP groups as local GPU ids (the same on every machine)."""
        return _local_unique(self, self.cp_rank_groups) if self.layout.cp > 1 else ()

    def describe(self) -> list[str]:
        """One line per kind of group, for the config header and the plan's reasons."""
        lay, lines = self.layout, []
        where = " on every machine" if self.num_machines > 1 else ""
        if lay.tp > 1:
            lines.append(f"tensor parallel groups of {lay.tp}{where}: GPUs {_fmt(self.tp_groups)}")
        if lay.cp > 1:
            lines.append(f"context parallel groups of {lay.cp}{where}: GPUs {_fmt(self.cp_groups)}")
        shard = lay.dp_shard * lay.cp
        first = self.fsdp_rank_groups[0]
        span = f" over {len(self.machines(first))} machines" if self.num_machines > 1 else ""
        n = len(self.gpu_ids)
        members = (
            ", ".join(f"GPU {self._gpu(r)} of machine {r // n}" for r in first)
            if self.num_machines > 1
            else "GPUs " + ",".join(str(g) for g in self.gpus(first))
        )
        lines.append(
            f"FSDP2 shards over {shard} ranks (one per TP position{span}), e.g. {members}"
            if lay.tp > 1
            else f"FSDP2 shards over all {shard} ranks{span}"
        )
        return lines


def _local_unique(pg: ParallelGroups, groups) -> tuple[tuple[int, ...], ...]:
    out = []
    for g in groups:
        ids = pg.gpus(g)
        if ids not in out:
            out.append(ids)
    return tuple(out)


def _fmt(groups) -> str:
    return " | ".join(",".join(str(i) for i in g) for g in groups)
