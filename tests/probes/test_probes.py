"""Machine graphs (sysfs, nvidia-smi topo -m), the S_n/S_g classifier, graph JSON.

Fixture sysfs trees come from tests/make_sysfs_fixtures.py (the BytePS paper's (OSDI 2020) two machines and
variants); real ``nvidia-smi topo -m`` outputs are in tests/fixtures/topo (copies of
../shared/topo). The verdict for each real output is derived by hand from its matrix in
the comment beside it.
"""

from __future__ import annotations

import re
import time
import warnings
from pathlib import Path

import networkx as nx
import pytest

import make_sysfs_fixtures as mk
from autotune.probes import (
    NvsmiParseError, SysfsError, Verdict, bandwidth_class, classify, from_json, load_graph,
    local_facts, machine_graph, parse_topo, read_sysfs, save_graph, to_json, topo_graph)
from autotune.probes.cluster import _cluster_graph
from autotune.probes.nvml import merge_nvlinks
from autotune.probes.nvsmi import merge_topo

HERE = Path(__file__).resolve().parents[1]
TOPO_COPIES = HERE / "fixtures" / "topo"
TOPO_SHARED = Path(__file__).resolve().parents[3] / "shared" / "topo"


def topo_path(name: str) -> Path:
    """A saved topo output: the copy in tests/fixtures (preferred) or ../shared/topo."""
    copy = TOPO_COPIES / name
    return copy if copy.exists() else TOPO_SHARED / name


def topo_text(name: str) -> str:
    return topo_path(name).read_text()


@pytest.fixture(scope="module")
def fx(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return mk.build_all(tmp_path_factory.mktemp("sysfs"))


# ---------------------------------------------------------------------------------------
# the BytePS paper's (OSDI 2020) machines as sysfs trees

def test_pcie_only_box_is_symmetric_and_cpu_assisted(fx) -> None:
    g = read_sysfs(fx["pcie_only"])
    v = classify(g)
    # NIC on its own root port: no switch holds GPUs and a NIC (S_n=0); two GPU switches
    assert (v.S_n, v.S_g, v.rule, v.intra, v.cpu_assisted) == (0, 2, 2, "scatter", True)
    assert v.n_gpus == 8  # the ASPEED BMC VGA is not a GPU
    assert v.n_nics == 2  # mlx5_0 and eno1; the SR-IOV virtual function is not a NIC
    assert v.root_candidates == tuple(range(8))
    switches = [n for n, d in g.nodes(data=True) if d["kind"] == "pcie_switch"]
    gpu_switches = {n for n in switches if any(g.nodes[c]["kind"] == "gpu" for c in g[n])}
    assert gpu_switches == {"sw:0000:00:01.0", "sw:0000:80:01.0"}
    assert all(g.nodes[s]["switched"] for s in gpu_switches)
    assert g.nodes["sw:0000:00:02.0"]["switched"] is False  # NIC straight on the root port
    nic = g.nodes["nic:mlx5_0"]
    assert (nic["label"], nic["netdev"], nic["speed_gbps"]) == ("nic:100G", "ens2f0", 100.0)
    assert g.nodes["nic:eno1"]["label"] == "nic:1G"
    assert [g.nodes[f"gpu:{i}"]["bdf"] for i in (0, 4)] == ["0000:03:00.0", "0000:83:00.0"]
    assert g.edges["sw:0000:00:01.0", "gpu:0"]["label"] == "pcie:gen3x16"
    assert g.edges["hb:0000:00", "sw:0000:00:1c.4"]["label"] == "pcie:gen2x4"
    assert nx.has_path(g, "machine", "gpu:7") and g.nodes["gpu:7"]["numa"] == 1


def test_nvlink_box_roots_are_gpu2_and_gpu3_never_0_or_1(fx) -> None:
    v = classify(read_sysfs(fx["nvlink_box"]))
    # P0 holds GPU0, GPU1 and the NIC (S_n=1); P1..P3 hold only GPUs (S_g=3): rule 1
    assert (v.S_n, v.S_g, v.rule, v.intra, v.cpu_assisted) == (1, 3, 1, "root", False)
    # GPU2, GPU3 (P1, same socket as the NIC) first, then the other socket's GPUs
    assert v.root_candidates == (2, 3, 4, 5, 6, 7)
    assert 0 not in v.root_candidates and 1 not in v.root_candidates
    assert not v.nvlink  # sysfs alone cannot see NVLink


def test_nvlink_box_with_its_nvidia_smi_matrix(fx) -> None:
    g = machine_graph(fx["nvlink_box"], fx["nvlink_box_topo"])
    v = classify(g)
    assert g.graph["source"] == "sysfs+nvidia-smi"
    nv = {(a, b): d["links"] for a, b, d in g.edges(data=True) if d["kind"] == "nvlink"}
    assert len(nv) == 16  # the hybrid cube mesh: 4 NVLink neighbours per GPU
    assert nv[("gpu:0", "gpu:3")] == 2 and nv[("gpu:0", "gpu:1")] == 1
    assert (v.S_n, v.S_g, v.rule, v.root_candidates[:2], v.nvlink) == (1, 3, 1, (2, 3), True)
    # the matrix alone gives the same rule and roots (S_g counts hidden GPUs one by one)
    alone = classify(topo_graph(parse_topo(fx["nvlink_box_topo"].read_text())))
    assert (alone.S_n, alone.rule, alone.root_candidates) == (1, 1, (2, 3, 4, 5, 6, 7))
    assert alone.S_g == 6


def test_multi_nic_only_changes_the_counts(fx) -> None:
    four = classify(read_sysfs(fx["nvlink_box_4nic"]))
    assert (four.S_n, four.S_g, four.rule, four.intra) == (4, 0, 2, "scatter")
    two = classify(read_sysfs(fx["nvlink_box_2nic"]))
    # NICs on P0 and P2: P1 and P3 are GPU-only; each is on its NIC's socket
    assert (two.S_n, two.S_g, two.rule, two.intra) == (2, 2, 1, "root")
    assert two.root_candidates == (2, 3, 6, 7)


def test_cpu_only_vm_is_flat(fx) -> None:
    g = read_sysfs(fx["cpu_only"])
    v = classify(g)
    assert (v.S_n, v.S_g, v.rule, v.intra, v.root_candidates) == (0, 0, 0, "flat", ())
    assert sorted(n for n in g.nodes) == ["hb:0000:00", "machine", "nic:eth0", "numa:0"]
    assert g.nodes["numa:0"]["cpus"] == "0-1" and g.nodes["numa:0"]["n_cpus"] == 2
    assert g.nodes["nic:eth0"]["bdf"] == "0000:00:03.0"  # found through virtio2/net/eth0
    assert g.nodes["nic:eth0"]["label"] == "nic"  # speed -1: unknown


def test_this_machine() -> None:
    g = read_sysfs("/sys")
    v = classify(g)
    gpus = [n for n, k in g.nodes(data="kind") if k == "gpu"]
    assert v.n_gpus == len(gpus)
    assert any(k == "numa" for _, k in g.nodes(data="kind"))
    if not gpus:  # the CI machine: CPUs and NICs only
        assert (v.S_n, v.S_g, v.intra) == (0, 0, "flat")
    else:
        assert v.rule in (1, 2) if len(gpus) > 1 else v.rule == 0


def test_broken_sysfs_gives_a_clear_error(tmp_path: Path, fx) -> None:
    with pytest.raises(SysfsError, match="bus/pci/devices: no such directory"):
        read_sysfs(tmp_path)
    root = mk.pcie_only(tmp_path / "bad")
    (root / "bus/pci/devices/0000:03:00.0/class").write_text("garbage\n")
    with pytest.raises(SysfsError, match=r"0000:03:00.0/class: expected a hex number"):
        read_sysfs(root)


# ---------------------------------------------------------------------------------------
# local_facts: cheap, never raises

def test_local_facts_is_cheap_and_consistent() -> None:
    t0 = time.perf_counter()
    facts = local_facts()
    elapsed = time.perf_counter() - t0
    assert elapsed < 1.0
    assert facts.verdict == classify(facts.graph)
    assert facts.intra == facts.verdict.intra
    assert facts.root_candidates == facts.verdict.root_candidates


def test_local_facts_falls_back_with_a_warning(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match="CPU-only"):
        facts = local_facts(tmp_path / "nothing")
    assert facts.graph.graph["source"] == "fallback"
    assert facts.verdict.intra == "flat" and facts.warnings
    root = mk.cpu_only(tmp_path / "odd")
    (root / "bus/pci/devices/0000:00:03.0/class").write_text("\n")
    with pytest.warns(UserWarning):
        assert local_facts(root).verdict.intra == "flat"


def test_local_facts_follows_cuda_visible_devices(fx, monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,2,0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        facts = local_facts(fx["nvlink_box"], nvml=False)
    g = facts.graph
    phys = {g.nodes[n]["index"]: g.nodes[n]["physical_index"]
            for n, k in g.nodes(data="kind") if k == "gpu"}
    assert phys == {0: 3, 1: 2, 2: 0}
    v = facts.verdict
    # cuda:2 (physical GPU0) shares P0 with the NIC; cuda:0 and cuda:1 are on P1
    assert (v.S_n, v.S_g, v.rule, v.root_candidates) == (1, 1, 1, (0, 1))


# ---------------------------------------------------------------------------------------
# real nvidia-smi topo -m outputs: verdicts derived by hand from each matrix

VERDICTS = {
    # DGX-1: each mlx5_k is PIX to exactly two GPUs (0,1 / 2,3 / 4,5 / 6,7): four switches
    # holding 2 GPUs + 1 NIC each -> S_n=4, S_g=0 -> rule 2 over NVLink (NV1/NV2).
    "01_dgx1-v100_msccl-tools.txt": dict(S_n=4, S_g=0, rule=2, intra="scatter",
                                         cpu_assisted=False, n_gpus=8, n_nics=4, nvlink=True),
    # DGX A100: GPU pairs PXB to NIC pairs mlx5_0/1, 2/3, 6/7, 8/9 -> S_n=4; mlx5_4/5 and
    # 10/11 are SYS to every GPU (switches without GPUs do not count); S_g=0 -> rule 2.
    "02_dgx-a100_12x-mlx5_gengwg-cheatsheets.txt": dict(
        S_n=4, S_g=0, rule=2, intra="scatter", cpu_assisted=False, n_gpus=8, n_nics=12,
        nvlink=True),
    # Same layout with NICn names: NIC0..7 PXB to GPU pairs, NIC8/9 only to each other.
    "03_a100-sxm4-8x_10nic-legend_gpu-compress-decompress.txt": dict(
        S_n=4, S_g=0, rule=2, intra="scatter", cpu_assisted=False, n_gpus=8, n_nics=10,
        nvlink=True),
    # NICs on socket 0 only: GPU0,1 PXB NIC0,1 and GPU2,3 PXB NIC2,3 -> S_n=2; GPU4-7 are
    # SYS to every NIC -> GPU-only switches (NV12 hides their PCIe pairing: one each,
    # S_g=4) -> rule 1, roots GPU4-7 (all equally far: the other socket).
    "04_a100-8x_4nic_tachikoma-notes.txt": dict(
        S_n=2, S_g=4, rule=1, intra="root", cpu_assisted=False, n_gpus=8, n_nics=4,
        nvlink=True, root_candidates=(4, 5, 6, 7)),
    # PCIe only, no NICs listed: NODE within a socket means one root complex per GPU ->
    # S_n=0, S_g=8 -> rule 2, CPU-assisted (no NV#).
    "08_unknown-8gpu-pcie-node-sys_tachikoma-notes.txt": dict(
        S_n=0, S_g=8, rule=2, intra="scatter", cpu_assisted=True, n_gpus=8, n_nics=0,
        nvlink=False),
    # p3.8xlarge: 4 GPUs all NV1/NV2, no NICs listed -> S_n=0, S_g=4 -> rule 2 over NVLink.
    "10_aws-p3.8xlarge-4x-v100_huvm.txt": dict(
        S_n=0, S_g=4, rule=2, intra="scatter", cpu_assisted=False, n_gpus=4, n_nics=0,
        nvlink=True),
    # 2 P100s on different sockets joined by NV2 -> S_n=0, S_g=2 -> rule 2 over NVLink.
    "11_2x-p100-sxm2-nv2-cross-socket_rwth-c16g.txt": dict(
        S_n=0, S_g=2, rule=2, intra="scatter", cpu_assisted=False, n_gpus=2, n_nics=0,
        nvlink=True),
}


@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_real_topo_outputs_verdicts(name: str) -> None:
    v = classify(topo_graph(parse_topo(topo_text(name))))
    expected = dict(VERDICTS[name])
    roots = expected.pop("root_candidates", tuple(range(expected["n_gpus"])))
    assert {k: getattr(v, k) for k in expected} == expected
    assert v.root_candidates == roots


def test_fixture_copies_match_shared() -> None:
    if not TOPO_SHARED.is_dir():
        pytest.skip("../shared/topo is not beside this checkout")
    for name in VERDICTS:
        assert (TOPO_COPIES / name).read_text() == (TOPO_SHARED / name).read_text()


def test_parser_reads_names_affinity_and_nvlinks() -> None:
    dgx1 = parse_topo(topo_text("01_dgx1-v100_msccl-tools.txt"))
    assert dgx1.nics == ["mlx5_0", "mlx5_2", "mlx5_1", "mlx5_3"]  # old format, own order
    assert dgx1.rel["GPU2"]["mlx5_1"] == "PIX" and dgx1.rel["mlx5_1"]["GPU2"] == "PIX"
    assert dgx1.cpu_affinity["GPU4"] == "20-39,60-79" and dgx1.numa_affinity == {}
    assert len(dgx1.nvlinks()) == 16 and dgx1.nvlinks()[(0, 3)] == 2
    a100 = parse_topo(topo_text("03_a100-sxm4-8x_10nic-legend_gpu-compress-decompress.txt"))
    assert a100.nic_names["NIC9"] == "mlx5_9"
    assert len(a100.nvlinks()) == 28 and set(a100.nvlinks().values()) == {12}
    tk = parse_topo(topo_text("04_a100-8x_4nic_tachikoma-notes.txt"))
    assert tk.numa_affinity["GPU5"] == 1 and tk.cpu_affinity["GPU0"] == "0-31,64-95"
    aws = parse_topo(topo_text("10_aws-p3.8xlarge-4x-v100_huvm.txt"))
    assert aws.cpu_affinity["GPU3"] == "0-31" and aws.numa_affinity["GPU3"] is None
    p100 = parse_topo(topo_text("11_2x-p100-sxm2-nv2-cross-socket_rwth-c16g.txt"))
    assert p100.devices == ["GPU0", "GPU1"]  # ANSI escapes in the header stripped
    assert p100.numa_affinity == {"GPU0": 0, "GPU1": 1}
    g = topo_graph(p100)
    assert g.nodes["gpu:0"]["numa"] == 0 and g.nodes["gpu:1"]["numa"] == 1


def test_space_separated_copy_parses_the_same() -> None:
    text = topo_text("03_a100-sxm4-8x_10nic-legend_gpu-compress-decompress.txt")
    spaced = "\n".join(re.sub(r"\t+", "   ", line) for line in text.splitlines())
    a, b = parse_topo(text), parse_topo(spaced)
    assert (a.devices, a.rel, a.numa_affinity, a.nic_names) == \
        (b.devices, b.rel, b.numa_affinity, b.nic_names)


def _lines(name: str) -> list[str]:
    return topo_text(name).splitlines()


def _row(lines: list[str], dev: str) -> int:
    return next(i for i, line in enumerate(lines) if line.split("\t")[0] == dev)


BAD_CASES = ["truncated", "unknown", "short", "asymmetric", "order", "diagonal", "empty"]


@pytest.mark.parametrize("case", BAD_CASES)
def test_malformed_input_names_the_line(case: str) -> None:
    lines = _lines("01_dgx1-v100_msccl-tools.txt")
    r3, r5 = _row(lines, "GPU3"), _row(lines, "GPU5")
    if case == "truncated":  # file cut after GPU5's row
        lines, line, msg = lines[:r5 + 1], r5 + 1, "rows for GPU6, GPU7, mlx5_0"
    elif case == "unknown":
        lines[r3] = lines[r3].replace("PIX", "PIY")
        line, msg = r3 + 1, "unknown relation 'PIY'"
    elif case == "short":
        cells = lines[r3].split("\t")
        lines[r3] = "\t".join(cells[:5])
        line, msg = r3 + 1, "row GPU3 has 4 of 12 entries"
    elif case == "asymmetric":
        cells = lines[r5].split("\t")
        cells[1] = "NV1"  # GPU5 to GPU0 was SYS, GPU0's row still says SYS
        lines[r5] = "\t".join(cells)
        line, msg = r5 + 1, "not symmetric"
    elif case == "order":
        lines[r3], lines[r5] = lines[r5], lines[r3]
        line, msg = r3 + 1, "expected the row for GPU3"
    elif case == "diagonal":
        lines[r3] = lines[r3].replace(" X ", "NV1")
        line, msg = r3 + 1, "'X' must be on the diagonal"
    else:
        lines, line, msg = ["# comment", "", "nothing useful here"], 3, "no header row"
    with pytest.raises(NvsmiParseError, match=re.escape(msg)) as err:
        parse_topo("\n".join(lines))
    assert err.value.lineno == line
    assert f"line {line}:" in str(err.value)


def test_topo_with_other_gpu_count_does_not_merge(fx) -> None:
    g = read_sysfs(fx["pcie_only"])
    with pytest.raises(ValueError, match="nvidia-smi lists 4 GPUs but the sysfs graph has 8"):
        merge_topo(g, parse_topo(topo_text("10_aws-p3.8xlarge-4x-v100_huvm.txt")))


def test_nvml_links_merge_by_bus_id(fx) -> None:
    g = read_sysfs(fx["nvlink_box"])
    bus = {d["index"]: d["bdf"] for _, d in g.nodes(data=True) if d["kind"] == "gpu"}
    links = {(bus[0], bus[1]): 2, (bus[1], bus[0]): 2, (bus[2], "0000:c0:00.0"): 6,
             ("0000:ff:00.0", bus[3]): 1}  # the last one: a GPU sysfs does not know
    merge_nvlinks(g, (list(bus.values()), links))
    nv = sorted((a, b, d["links"]) for a, b, d in g.edges(data=True) if d["kind"] == "nvlink")
    assert nv == [("gpu:0", "gpu:1", 2), ("gpu:2", "nvswitch:0000:c0:00.0", 6)]
    assert g.nodes["nvswitch:0000:c0:00.0"]["kind"] == "nvswitch"
    assert classify(g).nvlink and g.graph["source"] == "sysfs+nvml"


# ---------------------------------------------------------------------------------------
# graph conventions and JSON

def test_every_node_and_edge_has_kind_and_label(fx) -> None:
    graphs = [read_sysfs(fx[k]) for k in ("pcie_only", "nvlink_box", "cpu_only")]
    graphs += [topo_graph(parse_topo(topo_text(n))) for n in VERDICTS]
    for g in graphs:
        for _, d in g.nodes(data=True):
            assert isinstance(d["kind"], str) and isinstance(d["label"], str) and d["label"]
        for _, _, d in g.edges(data=True):
            assert isinstance(d["kind"], str) and isinstance(d["label"], str) and d["label"]


def test_json_round_trip(fx, tmp_path: Path) -> None:
    g = machine_graph(fx["nvlink_box"], fx["nvlink_box_topo"])
    save_graph(g, tmp_path / "m.json")
    h = load_graph(tmp_path / "m.json")
    assert not h.is_directed()
    assert dict(h.nodes(data=True)) == dict(g.nodes(data=True))
    assert sorted(map(sorted, h.edges)) == sorted(map(sorted, g.edges))
    assert h.graph == g.graph and classify(h) == classify(g)
    c = _cluster_graph(["a", "b"], ["a", "a", "b"], [2, 2, 0], [[0, 9.4], [3.0, 0]],
                       [[0, 1e-4], [2e-4, 0]], 0.5, 2.0)
    d = from_json(to_json(c))
    assert d.is_directed() and d.edges["a", "b"]["label"] == "net:10G"
    assert d.edges["b", "a"]["slowest"] and not d.edges["a", "b"]["slowest"]
    assert d.nodes["a"]["label"] == "machine:2gpu" and d.nodes["a"]["ranks"] == [0, 1]
    with pytest.raises(ValueError, match="node-link"):
        from_json({"nodes": []})
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="not JSON"):
        load_graph(tmp_path / "bad.json")


@pytest.mark.parametrize("gbps,label", [(9.4, "10G"), (0.095, "100M"), (100, "100G"),
                                        (23, "25G"), (0.9, "1G"), (0, "?")])
def test_bandwidth_class(gbps: float, label: str) -> None:
    assert bandwidth_class(gbps) == label


def test_verdict_dict_round_trip(fx) -> None:
    v = classify(read_sysfs(fx["nvlink_box"]))
    assert Verdict.from_dict(v.to_dict()) == v
    assert v.to_dict()["root_candidates"] == [2, 3, 4, 5, 6, 7]
