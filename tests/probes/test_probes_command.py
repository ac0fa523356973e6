"""``autotune probe`` through click's CliRunner, on fixtures and on this machine's /sys."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import make_sysfs_fixtures as mk
from autotune.cli import cli
from autotune.probes import classify, from_json, read_sysfs

HERE = Path(__file__).resolve().parents[1]
TOPO = HERE / "fixtures" / "topo"
if not TOPO.is_dir():
    TOPO = Path(__file__).resolve().parents[3] / "shared" / "topo"


@pytest.fixture(scope="module")
def fx(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return mk.build_all(tmp_path_factory.mktemp("sysfs"))


def run(*args: str):
    return CliRunner().invoke(cli, ["probe", *args], catch_exceptions=False)


def test_tree_and_verdict_of_the_pcie_only_box(fx) -> None:
    res = run("--sysfs", str(fx["pcie_only"]))
    assert res.exit_code == 0, res.output
    out = res.output
    for text in ("NUMA 1", "PCIe switch 0000:80:01.0", "GPU 7", "mlx5_0", "eno1",
                 "S_n=0", "S_g=2", "intra=scatter", "CPU-assisted"):
        assert text in out, text
    assert "ASPEED" not in out and "0000:09:00.0" not in out  # BMC VGA is no GPU


def test_json_of_the_nvlink_box_with_its_matrix(fx) -> None:
    res = run("--json", "--sysfs", str(fx["nvlink_box"]), "--nvidia-smi",
              str(fx["nvlink_box_topo"]))
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    v = data["verdict"]
    assert (v["S_n"], v["S_g"], v["rule"], v["intra"]) == (1, 3, 1, "root")
    assert v["root_candidates"][:2] == [2, 3] and v["nvlink"] is True
    g = from_json(data["graph"])
    assert sum(1 for _, _, k in g.edges(data="kind") if k == "nvlink") == 16
    assert classify(g).to_dict() == v


def test_nvidia_smi_file_alone() -> None:
    res = run("--nvidia-smi", str(TOPO / "04_a100-8x_4nic_tachikoma-notes.txt"))
    assert res.exit_code == 0, res.output
    assert "intra=root" in res.output and "root candidates: 4,5,6,7" in res.output
    assert "NVLink (28 connections)" in res.output


def test_bad_inputs_are_clear_errors(fx, tmp_path: Path) -> None:
    bad = tmp_path / "topo.txt"
    lines = (TOPO / "10_aws-p3.8xlarge-4x-v100_huvm.txt").read_text().splitlines()
    bad.write_text("\n".join(lines[:5]) + "\n")  # two comment lines, header, 2 of 4 rows
    res = CliRunner().invoke(cli, ["probe", "--nvidia-smi", str(bad)])
    assert res.exit_code == 1
    assert "Error: nvidia-smi topo line 5: truncated matrix: rows for GPU2, GPU3" in res.output
    res = CliRunner().invoke(cli, ["probe", "--sysfs", str(fx["pcie_only"]), "--nvidia-smi",
                                   str(TOPO / "10_aws-p3.8xlarge-4x-v100_huvm.txt")])
    assert res.exit_code == 1 and "lists 4 GPUs but the sysfs graph has 8" in res.output
    res = CliRunner().invoke(cli, ["probe", "--sysfs", str(tmp_path)])
    assert res.exit_code == 1 and "no such directory" in res.output


def test_draw_writes_a_png(fx, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "box.png"
    res = run("--sysfs", str(fx["nvlink_box"]), "--nvidia-smi", str(fx["nvlink_box_topo"]),
              "--draw", str(out))
    assert res.exit_code == 0, res.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_draw_without_matplotlib_says_what_to_install(fx, tmp_path: Path,
                                                      monkeypatch) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    res = CliRunner().invoke(cli, ["probe", "--sysfs", str(fx["cpu_only"]), "--draw",
                                   str(tmp_path / "x.png")])
    assert res.exit_code == 1
    assert "pip install 'autotune[plot]'" in res.output
    assert not (tmp_path / "x.png").exists()


def test_this_machine() -> None:
    res = run()
    assert res.exit_code == 0, res.output
    assert "intra-machine verdict" in res.output and "machine" in res.output
    res = run("--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    here = classify(read_sysfs("/sys"))
    assert data["verdict"]["n_gpus"] == here.n_gpus
    if here.n_gpus == 0:  # the CI machine
        assert data["verdict"]["intra"] == "flat"
        assert (data["verdict"]["S_n"], data["verdict"]["S_g"]) == (0, 0)


def test_registered_in_the_cli() -> None:
    res = CliRunner().invoke(cli, ["--help"])
    assert "probe" in res.output


def _machine_figure(g):
    """The probe drawing's figure (not only the PNG), for looking into it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from autotune.probes.draw import _draw_machine

    return plt, _draw_machine(plt, g, classify(g))


def test_draw_has_the_verdict_a_legend_and_whole_nvlink_arcs(fx) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.patches import PathPatch

    from autotune.probes import machine_graph

    g = machine_graph(fx["nvlink_box"], fx["nvlink_box_topo"])
    plt, fig = _machine_figure(g)
    (ax,) = fig.axes
    title = ax.get_title(loc="left")
    assert "S_n=1, S_g=3 -> intra=root" in title and "GPU 2, 3, 4, 5, 6, 7" in title
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "GPU" in labels and "NIC" in labels and "reduce root candidate" in labels
    assert any(lbl.startswith("NVLink: 16 GPU pairs, 1-2 link(s)") for lbl in labels)
    arcs = [p for p in ax.patches if isinstance(p, PathPatch)]
    assert len(arcs) == 16
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    for arc in arcs:  # every arc lies inside the axes: none is clipped
        box = arc.get_path().get_extents()
        assert x0 <= box.x0 and box.x1 <= x1 and y0 <= box.y0 and box.y1 <= y1
    texts = {t.get_text() for t in ax.texts}
    assert {"GPU 0", "GPU 7"} <= texts and any(t.startswith("NIC mlx5_0") for t in texts)
    plt.close(fig)


def test_draw_of_an_nvidia_smi_matrix_and_of_a_vm(fx) -> None:
    pytest.importorskip("matplotlib")
    from autotune.probes import machine_graph

    g = machine_graph(None, TOPO / "04_a100-8x_4nic_tachikoma-notes.txt", run_smi=False)
    plt, fig = _machine_figure(g)
    ax = fig.axes[0]
    assert "S_n=2, S_g=4 -> intra=root" in ax.get_title(loc="left")
    assert any("NVLink: 28 GPU pairs, 12 link(s)" in t.get_text()
               for t in ax.get_legend().get_texts())
    plt.close(fig)
    g = machine_graph(fx["cpu_only"], None, run_smi=False)
    plt, fig = _machine_figure(g)
    ax = fig.axes[0]
    assert "intra=flat" in ax.get_title(loc="left")
    assert "NIC eth0" in {t.get_text() for t in ax.texts}  # labelled, not bare circles
    assert not any("NVLink" in t.get_text() for t in ax.get_legend().get_texts())
    plt.close(fig)
