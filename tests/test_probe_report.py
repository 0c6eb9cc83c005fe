"""Anomaly flags and the measured-vs-expected rows (pure; fake measurements, no processes)."""

from dataclasses import replace

from generator.probe.collectives import Measurement
from generator.probe.report import anomalies, table_rows
from generator.probe.subsets import Subset
from generator.topology import load_topology

GIB = 1024**3


def timed(busbw_gbps: float, n: int = 2) -> list[Measurement]:
    # all-reduce busbw = S/t * 2(n-1)/n  =>  t = S * 2(n-1)/n / busbw
    t = GIB * 2 * (n - 1) / n / (busbw_gbps * 1e9)
    return [Measurement("all_reduce", GIB, n, (t, t, t))]


def test_far_below_expected_is_flagged_and_near_is_not():
    topo = load_topology(machine="h200-sxm-2")
    pair = [Subset((0, 1), ("pair",))]
    assert anomalies(topo, pair, {"0,1": timed(330.0)}, {}) == []
    [line] = anomalies(topo, pair, {"0,1": timed(28.0)}, {})
    assert "under half" in line and "28.0" in line
    row = table_rows(topo, pair, {"0,1": timed(330.0)})[0]
    assert row[0] == "0,1" and row[2] == "330.0" and row[-1].endswith("%")


def test_small_messages_are_not_compared():
    topo = load_topology(machine="h200-sxm-2")
    small = [Measurement("all_reduce", 1024**2, 2, (0.001,))]
    assert anomalies(topo, [Subset((0, 1), ("pair",))], {"0,1": small}, {}) == []


def test_p2p_disabled_on_nvlink_and_nic_on_other_numa_node():
    topo = load_topology(machine="h200-sxm-2")
    link = replace(topo.link(0, 1), p2p=False)
    gpus = tuple(replace(g, numa=1) for g in topo.gpus)
    bad = replace(topo, links={(0, 1): link}, gpus=gpus, nic_numa={"mlx5_0": 0}, nics=("mlx5_0",))
    lines = anomalies(bad, [], {}, {"NCCL_P2P_DISABLE": "1"})
    assert any("peer-to-peer is disabled" in x for x in lines)
    assert any("NCCL_P2P_DISABLE is set" in x for x in lines)
    assert sum("NUMA node 1" in x for x in lines) == 2
