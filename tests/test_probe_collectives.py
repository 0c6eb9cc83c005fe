"""Bus-bandwidth arithmetic (nccl-tests definitions), sizes, subset choice and the bandwidth file reader."""

import json

import pytest

from generator.errors import UserError
from generator.probe.bandwidth_file import build_document, load_bandwidth_file, write_bandwidth_file
from generator.probe.collectives import Measurement, bus_factor, busbw_gbps, format_size, parse_size, parse_sizes
from generator.probe.subsets import choose_subsets
from generator.topology import load_topology


def test_bus_factors_match_nccl_tests():
    assert bus_factor("all_reduce", 2) == 1.0
    assert bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert bus_factor("all_gather", 8) == pytest.approx(0.875)
    assert bus_factor("reduce_scatter", 4) == pytest.approx(0.75)
    with pytest.raises(ValueError):
        bus_factor("broadcast", 2)


def test_busbw_from_time():
    # 1 GiB all-reduce over 8 ranks in 10 ms: algbw 107.4 GB/s, busbw x 1.75.
    assert busbw_gbps("all_reduce", 1024**3, 0.01, 8) == pytest.approx(1024**3 / 0.01 / 1e9 * 1.75)
    m = Measurement("all_gather", 16 * 1024**2, 4, (0.003, 0.001, 0.002))
    assert m.median_s == 0.002
    assert m.busbw_gbps == pytest.approx(m.algbw_gbps * 0.75)


def test_sizes():
    assert parse_size("1M") == 1024**2 and parse_size("1g") == 1024**3 and parse_size("512K") == 512 * 1024
    assert parse_sizes("1G,1M,1M") == [1024**2, 1024**3]
    assert format_size(256 * 1024**2) == "256M" and format_size(1000) == "1000B"
    for bad in ("", "abc", "0", "64G", "-1M"):
        with pytest.raises(UserError):
            parse_sizes(bad) if bad == "" else parse_size(bad)


def test_subsets_on_two_island_machine():
    topo = load_topology(machine="h200-nvl-8")
    subs = {s.gpu_ids: s.reasons for s in choose_subsets(list(range(8)), topo)}
    assert "island 0" in subs[(0, 1, 2, 3)] and "island 1" in subs[(4, 5, 6, 7)]
    assert sum(len(k) == 2 for k in subs) == 28  # every pair on 8 GPUs
    assert any("spans islands" in r for r in subs.values())
    assert "all" in subs[tuple(range(8))]
    quick = choose_subsets(list(range(8)), topo, quick=True)
    assert len(quick) < len(subs) and any(len(s.gpu_ids) == 2 for s in quick)


def test_subsets_without_topology_and_large_sample():
    assert [s.gpu_ids for s in choose_subsets([1, 0])] == [(0, 1)]
    topo = load_topology(machine="hgx-h200-8")
    assert all(len(s.gpu_ids) >= 2 for s in choose_subsets([0, 1, 2], topo))


def test_bandwidth_file_round_trip(tmp_path):
    results = {
        "0,1": [Measurement(c, s, 2, (0.01,)) for c in ("all_reduce", "all_gather") for s in (1024**2, 1024**3)],
        "0,1,2": [],
    }
    doc = build_document("2x test", [0, 1], results, {"torch": "x"})
    assert set(doc["subsets"]) == {"0,1"}
    assert doc["subsets"]["0,1"]["all_reduce"] == round(busbw_gbps("all_reduce", 1024**3, 0.01, 2), 3)
    assert set(doc["subsets"]["0,1"]["sizes"]) == {"1M", "1G"}
    path = write_bandwidth_file(str(tmp_path / "bw.json"), doc)
    assert load_bandwidth_file(path) == {(0, 1): doc["subsets"]["0,1"]["all_reduce"]}
    with pytest.raises(UserError):
        write_bandwidth_file(path, doc)  # no overwrite without force


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        "[]",
        '{"version": 2, "subsets": {}}',
        '{"version": 1, "subsets": {"0,x": {"all_reduce": 1}}}',
        '{"version": 1, "subsets": {"0,1": {"all_reduce": -1}}}',
        '{"version": 1, "subsets": {"0,0": {"all_reduce": 5}}}',
        '{"version": 1, "subsets": {"0,1": {"all_reduce": true}}}',
    ],
)
def test_bandwidth_file_rejects_bad_content(tmp_path, content):
    p = tmp_path / "bw.json"
    p.write_text(content)
    with pytest.raises(UserError):
        load_bandwidth_file(str(p))


def test_bandwidth_file_accepts_plain_numbers(tmp_path):
    p = tmp_path / "bw.json"
    p.write_text(json.dumps({"version": 1, "subsets": {"1,0": 365.2}}))
    assert load_bandwidth_file(str(p)) == {(0, 1): 365.2}
