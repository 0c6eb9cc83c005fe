"""Measured vs expected, and the anomalies worth a human's attention. Pure except `print_table`."""

from __future__ import annotations

from generator.probe.collectives import COLLECTIVES, Measurement
from generator.probe.subsets import Subset

FAR_BELOW = 0.5
"""A subset measuring under this fraction of its expected bandwidth is flagged."""
PEAK_MIN_BYTES = 64 * 1024**2
"""Below this message size NCCL does not reach peak; such runs are not compared with the expected figure."""


def at_largest(measurements: list[Measurement], collective: str) -> Measurement | None:
    ms = [m for m in measurements if m.collective == collective]
    return max(ms, key=lambda m: m.size_bytes) if ms else None


def expected_gbps(topo, subset: Subset, p2p_disabled: bool = False) -> float | None:
    """The topology engine's predicted all-reduce bus bandwidth for this subset (None without a topology)."""
    if topo is None:
        return None
    from generator.topology import subset_busbw_gbps

    return subset_busbw_gbps(topo, list(subset.gpu_ids), p2p_disabled=p2p_disabled)


def anomalies(topo, subsets: list[Subset], results: dict[str, list[Measurement]], env: dict[str, str]) -> list[str]:
    out = []
    if topo is not None:
        nv_pairs = [(i, j) for (i, j), link in sorted(topo.links.items()) if link.kind == "NV"]
        for i, j in nv_pairs:
            if topo.link(i, j).p2p is False:
                out.append(f"GPUs {i},{j}: NVLink present but peer-to-peer is disabled (driver / ACS / IOMMU setting).")
        if nv_pairs and env.get("NCCL_P2P_DISABLE", "0") not in ("", "0"):
            out.append(
                "NCCL_P2P_DISABLE is set in this environment although the GPUs have NVLink: NCCL falls back "
                "to host memory (about 10x slower on the reference H200 pair)."
            )
        nic_nodes = set(topo.nic_numa.values())
        for gpu in topo.gpus:
            if nic_nodes and gpu.numa is not None and gpu.numa not in nic_nodes:
                out.append(
                    f"GPU {gpu.index} is on NUMA node {gpu.numa} but no NIC is (NICs on "
                    f"{','.join(map(str, sorted(nic_nodes)))}): inter-node traffic crosses the CPU link."
                )
    for subset in subsets:
        m = at_largest(results.get(subset.key, []), "all_reduce")
        expected = expected_gbps(topo, subset)
        if m is None or not expected or m.size_bytes < PEAK_MIN_BYTES:
            continue
        if m.busbw_gbps < FAR_BELOW * expected:
            out.append(
                f"GPUs {subset.key}: all-reduce measured {m.busbw_gbps:.1f} GB/s, under half the expected "
                f"{expected:.0f} GB/s (predicted from the topology)."
            )
    return out


def table_rows(topo, subsets: list[Subset], results: dict[str, list[Measurement]], p2p_disabled: bool = False):
    rows = []
    for subset in subsets:
        ms = results.get(subset.key, [])
        cells = []
        for collective in COLLECTIVES:
            m = at_largest(ms, collective)
            cells.append(f"{m.busbw_gbps:.1f}" if m else "-")
        expected = expected_gbps(topo, subset, p2p_disabled)
        ar = at_largest(ms, "all_reduce")
        ratio = f"{ar.busbw_gbps / expected:.0%}" if ar and expected else "-"
        rows.append([subset.key, ", ".join(subset.reasons), *cells, f"{expected:.0f}" if expected else "-", ratio])
    return rows


def print_table(console, topo, subsets, results, title: str, p2p_disabled: bool = False) -> None:
    from rich.table import Table

    caption = "GB/s at the largest message; expected = topology prediction for all-reduce; ratio = measured/expected"
    table = Table(title=title, caption=caption)
    for name in ("GPUs", "why", "all-reduce", "all-gather", "red-scatter", "expected", "ratio"):
        table.add_column(name, justify="left" if name in ("GPUs", "why") else "right", overflow="fold")
    for row in table_rows(topo, subsets, results, p2p_disabled):
        table.add_row(*row)
    console.print(table)
