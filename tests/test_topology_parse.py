"""The `nvidia-smi topo -m` parser on every shape from the wild, and one clear error per kind of bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from generator.errors import UserError
from generator.topology import is_clique, is_switched, islands, parse_topo_matrix
from generator.topology.smi_text import parse_matrix

FIX = Path(__file__).parent / "fixtures" / "topo"
SHARED_CAPTURE = Path("/work/shared/topo/h200-sxm-2x-nvswitch.topo-m.txt")


def read(name: str) -> str:
    return (FIX / name).read_text(encoding="utf-8", errors="replace")


def kinds(topo) -> dict[str, str]:
    return {f"{i}-{j}": (f"NV{x.nvlinks}" if x.kind == "NV" else x.kind) for (i, j), x in topo.links.items()}


def test_real_capture_fixture_is_byte_for_byte():
    if SHARED_CAPTURE.exists():
        assert (FIX / "h200-sxm-2x-nvswitch.topo-m.txt").read_bytes() == SHARED_CAPTURE.read_bytes()


@pytest.mark.parametrize("name", ["h200-sxm-2x-nvswitch.topo-m.txt", "h200-sxm-2x-spaces.txt"])
def test_real_h200_capture_with_ansi_and_empty_cell(name):
    topo = parse_topo_matrix(read(name))
    assert topo.indices == (0, 1)
    assert kinds(topo) == {"0-1": "NV18"}
    assert [g.numa for g in topo.gpus] == [0, 0]
    assert [g.cpu_affinity for g in topo.gpus] == ["0-31", "0-31"]
    assert topo.link(0, 1).busbw_gbps == pytest.approx(339, abs=1)


def test_hgx_nvswitch_with_nic_columns_and_legend():
    topo = parse_topo_matrix(read("hgx-8x-nvswitch-nics.txt"))
    assert len(topo.gpus) == 8
    assert set(kinds(topo).values()) == {"NV18"}
    assert islands(topo) == [list(range(8))]
    assert is_clique(topo, range(8)) and is_switched(topo, range(8))
    assert topo.nics[:2] == ("mlx5_0", "mlx5_1") and topo.nics[-2:] == ("mlx5_bond_0", "mlx5_bond_1")
    assert topo.nic_numa["mlx5_0"] == 0 and topo.nic_numa["mlx5_7"] == 1 and topo.nic_numa["mlx5_bond_1"] == 1
    assert [g.numa for g in topo.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_h200_nvl_two_groups_of_four():
    topo = parse_topo_matrix(read("h200-nvl-8-two-groups.txt"))
    assert islands(topo) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert is_clique(topo, [0, 1, 2, 3]) and not is_switched(topo, [0, 1, 2, 3])
    assert topo.link(0, 3).nvlinks == 6 and topo.link(3, 4).kind == "SYS"


def test_a100_pcie_bridge_pairs_with_old_style_nic_names():
    topo = parse_topo_matrix(read("a100-pcie-4x-nv12-pairs.txt"))
    assert islands(topo) == [[0, 1], [2, 3]]
    assert topo.link(0, 1).nvlinks == 12 and topo.link(1, 2).kind == "SYS"
    assert topo.nics == ("mlx5_0", "mlx5_1")
    assert any("NVLink3" in w for w in topo.warnings)  # guessed from NV12, and said so


def test_dual_socket_pcie_every_path_kind_space_separated():
    topo = parse_topo_matrix(read("pcie-dual-socket-mixed-spaces.txt"))
    assert set(kinds(topo).values()) == {"PIX", "PXB", "PHB", "NODE", "SYS"}
    assert islands(topo) == [[i] for i in range(8)]
    assert [g.numa for g in topo.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    bws = {k: topo.links[(0, j)].busbw_gbps for j, k in [(1, "PIX"), (2, "PXB"), (3, "PHB"), (4, "SYS")]}
    assert bws["PIX"] > bws["PXB"] > bws["PHB"] > bws["SYS"]
    assert topo.link(4, 6).kind == "NODE"


def test_v100_hybrid_cube_mesh():
    topo = parse_topo_matrix(read("v100-dgx1-cube-mesh.txt"))
    assert islands(topo) == [list(range(8))]
    assert not is_clique(topo, range(8)) and is_clique(topo, [0, 1, 2, 3])
    for g in range(8):
        assert sum(topo.link(g, h).nvlinks for h in range(8) if h != g) == 6  # 6 NVLink2 links per V100
    assert {topo.link(0, 1).nvlinks, topo.link(0, 3).nvlinks} == {1, 2}


def test_legacy_soc_reads_as_sys_without_numa_column():
    topo = parse_topo_matrix(read("legacy-soc-4gpu.txt"))
    assert kinds(topo) == {"0-1": "PIX", "0-2": "SYS", "0-3": "SYS", "1-2": "SYS", "1-3": "SYS", "2-3": "PIX"}
    assert [g.numa for g in topo.gpus] == [None] * 4
    assert topo.gpu(2).cpu_affinity == "10-19,30-39"


def test_prompt_lines_indentation_crlf_and_trailing_junk():
    topo = parse_topo_matrix(read("prompt-indent-crlf-junk.txt"))
    assert topo.indices == (0, 1, 2, 3)
    assert kinds(topo)["0-1"] == "NV12" and kinds(topo)["1-2"] == "NODE"


def test_odd_gpu_count_without_legend():
    topo = parse_topo_matrix(read("odd-3gpu-no-legend.txt"))
    assert islands(topo) == [[0, 1], [2]]
    assert [g.numa for g in topo.gpus] == [0, 0, 1]


def test_single_gpu():
    topo = parse_topo_matrix(read("single-gpu.txt"))
    assert topo.indices == (0,) and topo.links == {} and islands(topo) == [[0]]


def test_fused_header_and_cells_keep_the_gpu_matrix_and_warn():
    topo = parse_topo_matrix(read("fused-columns.txt"))
    assert islands(topo) == [[0, 1], [2, 3]]
    assert topo.link(0, 2).kind == "SYS" and topo.link(2, 3).nvlinks == 4
    assert any("GPU3NIC0" in w for w in topo.warnings)
    assert any("SYSSYS" in w for w in topo.warnings)
    assert topo.nics == ("mlx5_0", "mlx5_1")


def test_header_that_lost_a_nic_column_keeps_gpu_matrix():
    topo = parse_topo_matrix(read("fused-lost-nic-column.txt"))
    assert kinds(topo) == {"0-1": "NV18"}
    assert any("kept the GPU matrix" in w for w in topo.warnings)


def test_tabs_and_space_runs_parse_identically():
    text = read("hgx-8x-nvswitch-nics.txt")
    base = parse_matrix(text)
    for variant in (text.replace("\t", "  "), text.replace("\t", " \t "), text.expandtabs(4)):
        other = parse_matrix(variant)
        assert other.codes == base.codes and other.numa == base.numa and other.cpu_affinity == base.cpu_affinity


def test_numa_affinity_as_range_or_list_takes_first_node():
    text = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tSYS\t0-15\t0-1\nGPU1\tSYS\t X \t16-31\t2,3\n"
    topo = parse_topo_matrix(text)
    assert [g.numa for g in topo.gpus] == [0, 2]


BAD = {
    "bad-empty.txt": "empty",
    "bad-p2p-matrix.txt": "-p2p",
    "bad-smi-error.txt": "error message",
    "bad-nonsquare.txt": "not square",
    "bad-asymmetric.txt": "not symmetric",
    "bad-unknown-code.txt": "unknown link code 'QPI' at row GPU1, column GPU2 (line 3)",
}


@pytest.mark.parametrize("name,needle", sorted(BAD.items()))
def test_bad_inputs_give_one_clear_line(name, needle):
    with pytest.raises(UserError) as err:
        parse_topo_matrix(read(name))
    message = str(err.value)
    assert needle in message and "\n" not in message


def test_binary_input_is_rejected():
    data = (FIX / "bad-binary.bin").read_bytes().decode("latin-1")
    with pytest.raises(UserError, match="binary"):
        parse_topo_matrix(data)


@pytest.mark.parametrize(
    "text,needle",
    [
        ("\tGPU0\tGPU1\nGPU0\t X \tNV4\n", "no row for GPU1"),
        ("\tGPU0\tGPU1\nGPU0\t X \nGPU1\tNV4\t X \n", "has 1 link cells"),
        ("\tGPU0\tGPU1\nGPU0\tNV4\tNV4\nGPU1\tNV4\t X \n", "must be X"),
        ("\tGPU0\tGPU1\nGPU0\t X \tX\nGPU1\tX\t X \n", "means self"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNV0\nGPU1\tNV0\t X \n", "not a link count"),
        ("\tGPU0\tGPU0\nGPU0\t X \tNV4\n", "appears twice"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU0\t X \tNV4\nGPU1\tNV4\t X \n", "appears twice"),
        ("hello world\n", "no `GPU0 GPU1 ...` header"),
        ("-bash: nvidia-smi: command not found\n", "error message"),
    ],
)
def test_malformed_matrices(text, needle):
    with pytest.raises(UserError, match=None) as err:
        parse_topo_matrix(text)
    assert needle in str(err.value)
