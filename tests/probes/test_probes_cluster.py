"""The cluster bandwidth probe with real processes and real gloo on loopback.

One process group (3 processes) runs every configuration of tests/probes_helpers.py;
the tests read what each rank returned.
"""

from __future__ import annotations

# own world: ranks on emulated hosts, probing their links

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from autotune.probes.cluster import round_robin
from autotune.probes.graph import from_json
import zygote

HERE = Path(__file__).resolve().parents[1]
WORKER = HERE / "probes_helpers.py"
CONFIGS = ["env", "two", "one", "badname"]
WORLD = 3


def run_world(out: Path, configs: list[str], envs: list[dict[str, str]],
              prefixes: list[list[str]] | None = None, timeout: float = 180) -> None:
    init = out / "store"
    procs = []
    for rank, extra in enumerate(envs):
        env = {**os.environ, **extra}
        cmd = (prefixes[rank] if prefixes else []) + [
            sys.executable, str(WORKER), str(rank), str(len(envs)), str(init), str(out),
            ",".join(configs)]
        procs.append(zygote.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, text in zip(procs, outputs):
        assert p.returncode == 0, text


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    out = tmp_path_factory.mktemp("cluster")
    envs = [{"AUTOTUNE_MACHINE": f"m{r}", "GLOO_SOCKET_IFNAME": "lo"} for r in range(WORLD)]
    run_world(out, CONFIGS, envs)
    return {c: [json.loads((out / f"{c}.{r}.json").read_text()) for r in range(WORLD)]
            for c in CONFIGS}


def graphs(records: list[dict]):
    for rec in records:
        assert "error" not in rec, rec.get("trace")
    return [from_json(rec["graph"]) for rec in records]


def check_slowest(g) -> None:
    marked = [e for e in g.edges if g.edges[e]["slowest"]]
    assert len(marked) == 1
    assert g.edges[marked[0]]["gbps"] == min(g.edges[e]["gbps"] for e in g.edges)
    assert g.graph["slowest"] == list(marked[0])


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 8, 11])
def test_round_robin_covers_every_pair_once_with_disjoint_rounds(m: int) -> None:
    rounds = round_robin(m)
    pairs = [p for r in rounds for p in r]
    assert sorted(pairs) == [(i, j) for i in range(m) for j in range(i + 1, m)]
    for r in rounds:
        players = [x for p in r for x in p]
        assert len(players) == len(set(players))
    assert len(rounds) <= m  # rounds run in parallel: time grows with m, not m^2


def test_three_machines_measured_both_ways_same_graph_on_every_rank(results) -> None:
    gs = graphs(results["env"])
    g = gs[0]
    assert g.is_directed()
    assert sorted(g.nodes) == ["m0", "m1", "m2"]
    assert g.number_of_edges() == 6
    for a, b, d in g.edges(data=True):
        assert d["kind"] == "net"
        assert d["gbps"] > 0.05, (a, b, d)  # loopback moves far more than 50 Mbit/s
        assert d["label"].startswith("net:") and d["label"] != "net:?"
        assert d["rtt_us"] > 0
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0  # probe's default
    for node, d in g.nodes(data=True):
        assert d["kind"] == "machine" and d["label"] == f"machine:{gpus}gpu"
        assert d["ranks"] == [int(node[1])]
    check_slowest(g)
    for other in gs[1:]:  # every rank returns the same measurements
        assert sorted(other.edges(data="gbps")) == sorted(g.edges(data="gbps"))
        assert dict(other.nodes(data=True)) == dict(g.nodes(data=True))


def test_time_is_bounded_by_the_budget(results) -> None:
    for config in ("env", "two", "one"):
        for rec in results[config]:
            # budget plus start-up slack (tensor set-up, a loaded 2-core machine)
            assert rec["elapsed"] < rec["budget"] + 5.0, (config, rec["elapsed"])


def test_ranks_on_one_machine_share_a_node_and_its_leader_measures(results) -> None:
    gs = graphs(results["two"])
    g = gs[0]
    assert sorted(g.nodes) == ["b", "büro-a"]
    a = g.nodes["büro-a"]
    assert a["ranks"] == [0, 1] and a["leader"] == 0
    assert a["n_gpus"] == 4 and a["label"] == "machine:4gpu"
    assert g.nodes["b"]["label"] == "machine:0gpu"
    assert sorted(g.edges) == [("b", "büro-a"), ("büro-a", "b")]
    assert all(d["gbps"] > 0.05 for _, _, d in g.edges(data=True))
    check_slowest(g)
    for other in gs[1:]:
        assert sorted(other.edges(data="gbps")) == sorted(g.edges(data="gbps"))


def test_single_machine_has_no_links(results) -> None:
    for g in graphs(results["one"]):
        assert list(g.nodes) == ["solo"]
        assert g.nodes["solo"]["ranks"] == [0, 1, 2]
        assert g.number_of_edges() == 0 and "slowest" not in g.graph


def test_bad_machine_name_fails_on_every_rank_without_hanging(results) -> None:
    for rec in results["badname"]:
        assert "error" in rec
        assert "rank 2" in rec["error"] and "AUTOTUNE_MACHINE" in rec["error"]


@pytest.mark.root
@pytest.mark.serial  # a rate, measured: alone on the machine
@pytest.mark.slow
def test_probe_measures_a_shaped_link(tmp_path: Path) -> None:
    """Two emulated hosts (network namespaces, veth shaped with tbf at 100 Mbit/s both
    ways): the probe must report about 0.1 Gbit/s each way, not loopback speed."""
    from autotune.emulate import Cluster

    with Cluster(hosts=2, rate="100mbit") as c:
        envs, prefixes = [], []
        for host in range(2):
            env = c.env(rank=host, world_size=2, host=host, role="worker", master_port=0)
            envs.append({k: env[k] for k in ("GLOO_SOCKET_IFNAME", "AUTOTUNE_MACHINE")})
            prefixes.append(c.wrap(host, []))
        run_world(tmp_path, ["shaped"], envs, prefixes=prefixes, timeout=240)
    recs = [json.loads((tmp_path / f"shaped.{r}.json").read_text()) for r in range(2)]
    g = graphs(recs)[0]
    assert sorted(g.nodes) == sorted(h.netns for h in c.hosts)
    for a, b, d in g.edges(data=True):
        assert 0.06 < d["gbps"] < 0.105, (a, b, d["gbps"])
        assert d["label"] == "net:100M"
    check_slowest(g)
