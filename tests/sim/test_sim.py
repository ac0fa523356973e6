"""The cluster simulator: paper-000 formulas, monotonicity, topologies, errors, speed."""

from __future__ import annotations

import json
import math
import random
import statistics
import time

import pytest

from autotune.sim import (
    GBIT, ClusterSpec, ClusterError, Job, SimulatedObjective, byteps_shares, byteps_time,
    allreduce_time, calibrate_codecs, reset_calibration, simulate)
from autotune.sim.codecs import _codec_classes
from autotune.sim.model import _shared_link

MiB = 1 << 20

# The regime of the BytePS paper (OSDI 2020, §4.1): no latency, no per-chunk overhead, one stream at full
# rate, no per-flow cap, summation for free, sends and receives fully overlapped
# (enough chunks in flight), M much larger than a chunk.
IDEAL = dict(latency_us=0, intra_latency_us=0, chunk_overhead_us=0, per_flow_gbps=None,
             cpu_sum_gbps=None, worker_device="cpu", nic_gbps=10.0)


def paper_allreduce(n: int, M: float, B: float) -> float:
    return 2 * (n - 1) * M / (n * B)


def paper_byteps(n: int, k: int, M: float, B: float) -> float:
    return 2 * n * (n - 1) * M / ((n * n + k * n - 2 * k) * B)


# ------------------------------------------------------------------------- formulas
@pytest.mark.parametrize("n", [2, 3, 4, 8, 16, 64])
def test_allreduce_reproduces_paper_formula_exactly(n: int) -> None:
    cluster = ClusterSpec(machines=n, **IDEAL)
    job = Job((3 * MiB + 12345,) * 40 + (777,) * 9)  # ragged sizes: still exact
    for chunk in (64 * 1024, MiB, 16 * MiB):
        est = simulate(job, cluster, {"chunk_bytes": chunk})
        expected = paper_allreduce(n, job.total_bytes, 10.0 * GBIT)
        assert est.breakdown["network_s"] == pytest.approx(expected, rel=1e-12)
        assert est.comm_s == pytest.approx(expected, rel=1e-9)
        assert est.step_s == pytest.approx(expected, rel=1e-9)  # compute is 0
        assert est.nic_bytes["worker"] == pytest.approx(2 * (n - 1) / n * job.total_bytes)
    assert allreduce_time(n, job.total_bytes, 10.0 * GBIT) == pytest.approx(expected)


@pytest.mark.parametrize("n,k", [(2, 1), (2, 2), (3, 1), (4, 1), (4, 2), (4, 3), (4, 4),
                                 (8, 2), (8, 5), (16, 8)])
def test_pushpull_reproduces_byteps_formula(n: int, k: int) -> None:
    cluster = ClusterSpec(machines=n, server_machines=k, pipeline_depth=8 * n, **IDEAL)
    d = n * n + k * n - 2 * k
    chunk = 256 * 1024
    # D equal chunks per round, so Eq. 1/2's shares are whole chunks: the split is exact
    job = Job((chunk,) * (d * max(1, 4096 // d)))
    M, B = job.total_bytes, 10.0 * GBIT
    est = simulate(job, cluster, {"transport": "pushpull", "servers": k, "chunk_bytes": chunk})
    expected = paper_byteps(n, k, M, B)
    assert est.breakdown["network_s"] == pytest.approx(expected, rel=1e-12)
    # the whole exchange: the steady state plus the drain of the last send window (the
    # Summation Services are store-and-forward: the pulls of the chunks pushed last are
    # not overlapped) and whole chunks per owner per window (uneven at small shares)
    assert expected <= est.comm_s * (1 + 1e-12)
    assert est.comm_s <= expected * 1.06
    assert byteps_time(n, k, M, B) == pytest.approx(expected, rel=1e-12)
    c_share, g_share = byteps_shares(n, k)
    assert c_share == pytest.approx(2 * (n - 1) / d) and g_share == pytest.approx((n - k) / d)
    # bytes on a server NIC: n * M_SS_CPU (the corrected Eq. 4)
    assert est.nic_bytes["server"] == pytest.approx(n * 2 * (n - 1) / d * M)


def test_pushpull_summation_is_store_and_forward() -> None:
    """A Summation Service sends a sum back only once every part is in (the runtime's
    summation.py), so big chunks cost their pull on top of the steady state: one chunk
    alone takes its push and then its pull, and with a dedicated server the step grows
    with the chunk size, as measured on the emulated cluster (benchmarks/notes/2026-11-23.md,
    "Goodput vs the optimum")."""
    n, B = 3, 10.0 * GBIT
    cluster = ClusterSpec(machines=n, server_machines=1, **IDEAL)
    one = Job((16 * MiB,))
    est = simulate(one, cluster, {"transport": "pushpull", "servers": 1, "chunk_bytes": 16 * MiB})
    # all n parts into the server, then the sum back to all n: nothing overlaps
    assert est.comm_s == pytest.approx(2 * n * 16 * MiB / B, rel=1e-9)
    assert est.breakdown["network_s"] == pytest.approx(n * 16 * MiB / B, rel=1e-9)
    # the calibration's cluster and job: ResNet-50's tensors at 1/6, 3 workers + 1 server
    cal = ClusterSpec(machines=3, server_machines=1, nic_gbps=0.19, worker_device="cpu")
    job = Job(tuple(b // 6 for b in Job.from_model("resnet50").grad_bytes))
    pp = {c: simulate(job, cal, {"transport": "pushpull", "servers": 1, "streams": 1,
                                 "chunk_bytes": c}).step_s
          for c in (64 * 1024, 256 * 1024, MiB, 4 * MiB)}
    steps = list(pp.values())
    assert all(b > a for a, b in zip(steps, steps[1:])), pp
    assert pp[4 * MiB] > 1.4 * pp[64 * 1024]  # measured: 1.70 s against 1.06 s
    # all-reduce is not store-and-forward: its time is flat in the chunk size
    ar = [simulate(job, cal, {"chunk_bytes": c}).step_s for c in (256 * 1024, MiB, 4 * MiB)]
    assert max(ar) < 1.05 * min(ar)


def test_summation_link_is_fifo_per_stream_and_shared_across_streams() -> None:
    """An owner's link: chunks on one stream go in order (one gloo pair, one TCP
    connection), streams share it evenly; a chunk cannot start before it arrives."""
    assert _shared_link([(0.0, 0, 1.0), (0.0, 0, 2.0)], 0.0) == [1.0, 3.0]
    assert _shared_link([(0.0, 0, 1.0), (0.0, 1, 1.0)], 0.5) == [2.5, 2.5]
    assert _shared_link([(0.0, 0, 1.0), (0.0, 1, 3.0)], 0.0) == [2.0, 4.0]
    # the second stream's chunk arrives at 1: alone until then, then half the link each
    assert _shared_link([(0.0, 0, 2.0), (1.0, 1, 1.0)], 0.0) == pytest.approx([3.0, 3.0])
    assert _shared_link([(2.0, 0, 1.0), (0.0, 0, 1.0)], 0.0) == [3.0, 4.0]  # in order


def test_pushpull_pull_overlaps_the_next_push_on_its_stream() -> None:
    """Two chunks for one server on one stream: the first one's sum comes back while the
    second one is pushed (push, push + pull, pull: 3 chunk times, not 4); on two streams
    the pushes share the link and finish together, then both pulls (4)."""
    n, b, B = 2, 4 * MiB, 10.0 * GBIT
    cluster = ClusterSpec(machines=n, server_machines=2, pipeline_depth=8, stream_overhead=0, **IDEAL)
    job = Job((b,) * 4)  # k >= n: the two servers own chunks 0, 2 and 1, 3
    one = n * b / B      # a chunk's n parts through a server's link
    fifo = simulate(job, cluster, {"transport": "pushpull", "servers": 2, "chunk_bytes": b})
    assert fifo.comm_s == pytest.approx(3 * one, rel=1e-9)
    shared = simulate(job, cluster, {"transport": "pushpull", "servers": 2, "chunk_bytes": b,
                                     "streams": 4})
    assert shared.comm_s == pytest.approx(4 * one, rel=1e-9)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_pushpull_trivial_cases(n: int) -> None:
    """k = 0 is colocated PS (= all-reduce's time), k > n non-colocated PS (M/B)."""
    cluster = ClusterSpec(machines=n, server_machines=2 * n, pipeline_depth=8 * n, **IDEAL)
    job = Job((MiB,) * (n * 512))
    M, B = job.total_bytes, 10.0 * GBIT
    colocated = simulate(job, cluster, {"transport": "pushpull", "servers": 0, "chunk_bytes": MiB})
    assert colocated.breakdown["network_s"] == pytest.approx(paper_allreduce(n, M, B), rel=1e-12)
    extra = simulate(job, cluster, {"transport": "pushpull", "servers": 2 * n, "chunk_bytes": MiB})
    assert extra.breakdown["network_s"] == pytest.approx(M / B, rel=1e-12)


def test_byteps_beats_allreduce_as_paper_says() -> None:
    # gamma_a = (n^2+kn-2k)/n^2: n = 32, k = 16 gives 1.46 (the BytePS paper, OSDI 2020, §4.1.1)
    n, k = 32, 16
    cluster = ClusterSpec(machines=n, server_machines=k, pipeline_depth=256, **IDEAL)
    d = n * n + k * n - 2 * k
    job = Job((64 * 1024,) * (4 * d))
    ar = simulate(job, cluster, {"chunk_bytes": 64 * 1024})
    pp = simulate(job, cluster, {"transport": "pushpull", "servers": k, "chunk_bytes": 64 * 1024})
    ratio = ar.breakdown["network_s"] / pp.breakdown["network_s"]
    assert ratio == pytest.approx(d / n ** 2, rel=1e-9)
    assert ratio == pytest.approx(1.46, abs=0.01)  # the paper truncates 1.46875


# ---------------------------------------------------------------------- monotonicity
def _random_configs(cluster: ClusterSpec, count: int, seed: int = 0) -> list[dict]:
    space = cluster.space(allow_lossy=True)
    rng = random.Random(seed)
    return [space.sample(rng) for _ in range(count)]


BASE = dict(machines=4, workers_per_machine=4, server_machines=4, gpus_per_switch=2,
            nic_switch=0, per_flow_gbps=8.0)


@pytest.mark.parametrize("field,values", [
    ("nic_gbps", [5, 10, 25, 100, 400]),
    ("server_nic_gbps", [5, 10, 25, 100]),
    ("pcie_gbps", [20, 50, 105, 250]),
    ("per_flow_gbps", [1, 4, 16, 64]),
    ("cpu_sum_gbps", [10, 50, 200, 1000]),
])
def test_more_bandwidth_is_never_slower(field: str, values: list[float]) -> None:
    job = Job.from_model("resnet50", compute_ms=30)
    clusters = [ClusterSpec(**{**BASE, field: v}) for v in values]
    for cfg in _random_configs(clusters[0], 60):
        steps = [simulate(job, c, cfg).step_s for c in clusters]
        assert all(b <= a * (1 + 1e-12) for a, b in zip(steps, steps[1:])), (cfg, steps)
    # and it matters: without a per-flow cap the default config is NIC-bound
    if field == "nic_gbps":
        slow, fast = (ClusterSpec(**{**BASE, "per_flow_gbps": None, field: v}) for v in (5, 400))
        default = slow.space().default()
        assert simulate(job, slow, default).step_s > 3 * simulate(job, fast, default).step_s


def test_more_latency_is_never_faster() -> None:
    job = Job.from_model("bert-base", compute_ms=50)
    clusters = [ClusterSpec(**{**BASE, "latency_us": v}) for v in (0, 10, 100, 1000)]
    for cfg in _random_configs(clusters[0], 60, seed=1):
        steps = [simulate(job, c, cfg).step_s for c in clusters]
        assert all(b >= a * (1 - 1e-12) for a, b in zip(steps, steps[1:])), (cfg, steps)


def test_streams_help_up_to_the_nic_rate_under_a_per_flow_cap() -> None:
    # NIC 25 Gbit/s, one flow at most 5: five streams fill the NIC
    cluster = ClusterSpec(machines=4, nic_gbps=25, per_flow_gbps=5, latency_us=20)
    job = Job.from_model("vgg16")
    net = {s: simulate(job, cluster, {"streams": s, "chunk_bytes": MiB}) for s in range(1, 17)}
    for s in range(1, 5):
        assert net[s + 1].step_s < net[s].step_s
        assert net[s + 1].breakdown["network_s"] < net[s].breakdown["network_s"]
    assert net[1].step_s / net[5].step_s > 4
    # beyond the NIC rate extra streams only cost their overhead
    best = min(net, key=lambda s: net[s].step_s)
    assert 5 <= best <= 8
    assert net[16].step_s > net[best].step_s
    assert net[16].step_s < 1.5 * net[best].step_s
    # without a cap one stream already fills the NIC
    free = ClusterSpec(machines=4, nic_gbps=25, latency_us=0, chunk_overhead_us=0)
    assert (simulate(job, free, {"streams": 1, "chunk_bytes": MiB}).breakdown["network_s"]
            <= simulate(job, free, {"streams": 4, "chunk_bytes": MiB}).breakdown["network_s"])


def test_chunk_size_trades_latency_against_overlap() -> None:
    cluster = ClusterSpec(machines=8, nic_gbps=25, latency_us=100, chunk_overhead_us=20)
    job = Job.from_model("resnet50", compute_ms=60)
    steps = {c: simulate(job, cluster, {"chunk_bytes": c, "streams": 2}).step_s
             for c in [2 ** e for e in range(16, 27)]}
    best = min(steps, key=steps.get)
    assert 64 * 1024 < best < 64 * MiB  # an interior optimum: neither extreme wins
    assert steps[64 * 1024] > 1.2 * steps[best]
    assert steps[64 * MiB] > 1.05 * steps[best]


def test_backward_overlap_hides_communication() -> None:
    cluster = ClusterSpec(machines=4, nic_gbps=100)
    grads = Job.from_model("resnet50").grad_bytes
    hidden = simulate(Job(grads, compute_s=0.5, backward_fraction=0.7), cluster, {"chunk_bytes": MiB})
    exposed = simulate(Job(grads, compute_s=0.5, backward_fraction=0.0), cluster, {"chunk_bytes": MiB})
    assert hidden.exposed_comm_s < 0.1 * exposed.exposed_comm_s
    assert exposed.exposed_comm_s == pytest.approx(exposed.comm_s, rel=1e-9)
    assert exposed.step_s == pytest.approx(0.5 + exposed.comm_s, rel=1e-9)
    assert hidden.throughput > exposed.throughput


def test_compression_shrinks_bytes_and_allgather_grows_with_workers() -> None:
    job = Job.from_model("resnet50")
    small = ClusterSpec(machines=4, nic_gbps=10)
    none = simulate(job, small, {"chunk_bytes": MiB})
    every = {"chunk_bytes": MiB, "compression": "fp16", "compress_min_bytes": 64 * 1024}
    fp16 = simulate(job, small, every)
    assert fp16.nic_bytes["worker"] == pytest.approx(none.nic_bytes["worker"] / 2)
    assert fp16.step_s < none.step_s
    assert fp16.breakdown["codec_s"] > 0
    # HiPress's selective rule, as the runtime applies it: a chunk under
    # compress_min_bytes travels as it is, so a threshold above every chunk is lossless
    plain = simulate(job, small, {**every, "compress_min_bytes": 4 * MiB})
    assert plain.nic_bytes["worker"] == pytest.approx(none.nic_bytes["worker"])
    assert plain.breakdown["codec_s"] == 0
    # a codec's parameter sets its payload: random-k at 25 % sends 2.5 times 10 %
    sparse = {"chunk_bytes": 4 * MiB, "compression": "randomk", "compress_min_bytes": 64 * 1024}
    r10 = simulate(job, small, {**sparse, "randomk_ratio": 0.1}).nic_bytes["worker"]
    r25 = simulate(job, small, {**sparse, "randomk_ratio": 0.25}).nic_bytes["worker"]
    assert r25 / r10 == pytest.approx(2.5, rel=0.02)
    # top-k payloads cannot be summed: all-gathered, so NIC bytes grow like (E-1)
    big = ClusterSpec(machines=64, nic_gbps=10)
    topk = {"chunk_bytes": MiB, "compression": "topk", "compress_min_bytes": 64 * 1024}
    k4 = simulate(job, small, topk).nic_bytes["worker"]
    k64 = simulate(job, big, topk).nic_bytes["worker"]
    assert k64 / k4 == pytest.approx(63 / 3)


# ------------------------------------------------------------------ intra-machine
def test_byteps_intra_machine_insights() -> None:
    job = Job.from_model("vgg16")
    # PCIe-only, 8 GPUs under 2 switches (the BytePS paper, OSDI 2020, §4.2.1): reduce-scatter beats a root
    pcie = ClusterSpec(machines=4, workers_per_machine=8, gpus_per_switch=4, nic_gbps=100,
                   server_machines=4)
    pp = {"transport": "pushpull", "servers": 4, "chunk_bytes": 4 * MiB}
    est = {i: simulate(job, pcie, {**pp, "intra": i}) for i in ("flat", "root", "scatter")}
    assert est["scatter"].step_s < est["root"].step_s
    assert est["scatter"].step_s < est["flat"].step_s
    assert est["flat"].nic_bytes["worker"] == pytest.approx(8 * est["root"].nic_bytes["worker"])
    # NVLink, NIC under switch 0 (§4.2.2): a root off the NIC's switch is better
    nvl = ClusterSpec(machines=4, workers_per_machine=8, gpus_per_switch=2, nic_switch=0,
                  nvlink_gbps=400, nic_gbps=100, server_machines=4)
    assert nvl.root_candidates()[:2] == [2, 3] and nvl.root_candidates()[-2:] == [0, 1]
    on = simulate(job, nvl, {**pp, "intra": "root", "reduce_root": 0})
    off = simulate(job, nvl, {**pp, "intra": "root", "reduce_root": 2})
    assert off.step_s < on.step_s
    assert on.bottleneck == "intra up:0"


def _probe_graph(nvlink: bool) -> dict:
    """A machine graph in autotune.probes' layout: 4 GPUs under 2 switches, NIC on sw0."""
    nodes = [{"id": "machine", "kind": "machine"}, {"id": "numa:0", "kind": "numa"},
             {"id": "hb:0", "kind": "host_bridge"},
             {"id": "sw:0", "kind": "pcie_switch"}, {"id": "sw:1", "kind": "pcie_switch"},
             {"id": "nic:eth0", "kind": "nic"}]
    edges = [{"source": "machine", "target": "numa:0", "kind": "smp"},
             {"source": "numa:0", "target": "hb:0", "kind": "pcie"},
             {"source": "hb:0", "target": "sw:0", "kind": "pcie", "label": "pcie:gen3x16"},
             {"source": "hb:0", "target": "sw:1", "kind": "pcie", "label": "pcie:gen3x16"},
             {"source": "sw:0", "target": "nic:eth0", "kind": "pcie", "label": "pcie:gen3x16"}]
    for i in range(4):
        nodes.append({"id": f"gpu:{i}", "kind": "gpu", "index": i})
        edges.append({"source": f"sw:{i // 2}", "target": f"gpu:{i}", "kind": "pcie",
                      "gen": 3, "width": 16})
    if nvlink:
        for i in range(4):
            for j in range(i + 1, 4):
                edges.append({"source": f"gpu:{i}", "target": f"gpu:{j}", "kind": "nvlink",
                              "label": "nvlink:2"})
    return {"directed": False, "multigraph": False, "graph": {}, "nodes": nodes, "edges": edges}


@pytest.mark.parametrize("nvlink", [False, True])
def test_probe_graph_matches_the_same_machine_described_by_numbers(nvlink: bool) -> None:
    pcie = 7.877 * 16 * 0.85
    common = dict(machines=4, workers_per_machine=4, server_machines=2, nic_gbps=50,
                  per_flow_gbps=10)
    graph = ClusterSpec(topology=_probe_graph(nvlink), nvlink_gbps=150 if nvlink else None, **common)
    numbers = ClusterSpec(gpus_per_switch=2, nic_switch=0, pcie_gbps=pcie,
                      nvlink_gbps=300 if nvlink else None, **common)
    assert graph.root_candidates() == numbers.root_candidates() == [2, 3, 0, 1]
    job = Job.from_model("resnet50", compute_ms=20)
    for cfg in _random_configs(numbers, 40, seed=2):
        a, b = simulate(job, graph, cfg), simulate(job, numbers, cfg)
        assert a.step_s == pytest.approx(b.step_s, rel=1e-9), cfg
        assert a.bottleneck == b.bottleneck


def test_nvswitch_ports() -> None:
    topo = _probe_graph(False)
    topo["nodes"].append({"id": "nvswitch:0", "kind": "nvswitch"})
    for i in range(4):
        topo["edges"].append({"source": f"gpu:{i}", "target": "nvswitch:0", "kind": "nvlink", "links": 6})
    c = ClusterSpec(machines=2, workers_per_machine=4, topology=topo, nvlink_gbps=200)
    m = c.machine
    assert m.path(0, 3) == [(("nvport", 0), 0), (("nvport", 3), 1)]
    assert m.bw[("nvport", 1)] == pytest.approx(6 * 200 * GBIT)
    assert m.path(0, "host") == [(("gpu", 0), 0), (("up", 0), 0)]


# -------------------------------------------------------------------------- errors
@pytest.mark.parametrize("data,message", [
    ({"workers_per_machine": 2}, "missing required field 'machines'"),
    ({"machines": 2, "nic_gpbs": 10}, "unknown field 'nic_gpbs' \\(did you mean 'nic_gbps'\\?\\)"),
    ({"machines": 0}, "'machines' must be >= 1, got 0"),
    ({"machines": 2.5}, "'machines' must be an integer"),
    ({"machines": 2, "nic_gbps": "fast"}, "'nic_gbps' must be a number, got 'fast'"),
    ({"machines": 2, "nic_gbps": -1}, "'nic_gbps' must be > 0"),
    ({"machines": 2, "per_flow_gbps": 0}, "'per_flow_gbps' must be > 0"),
    ({"machines": 2, "latency_us": -5}, "'latency_us' must be >= 0"),
    ({"machines": 2, "worker_device": "tpu"}, "'worker_device' must be 'gpu' or 'cpu'"),
    ({"machines": 2, "gpus_per_machine": 2, "workers_per_machine": 2}, "not both"),
    ({"machines": 2, "workers_per_machine": 4, "gpus_per_switch": 2, "nic_switch": 5},
     "'nic_switch' is 5 but the machine has 2 PCIe switch"),
    ({"machines": 2, "topology": [1, 2]}, "'topology' must be a node-link graph"),
    ({"machines": 2, "workers_per_machine": 8, "topology": _probe_graph(False)},
     "topology has 4 GPU\\(s\\) but workers_per_machine is 8"),
    ({"machines": 2, "topology": {"nodes": [{"id": "a"}], "edges": []}}, "node 'a' has no 'kind'"),
    ({"machines": 2, "topology": _probe_graph(False), "nic": "eth9"}, "'nic' names 'eth9'"),
    ({"machines": 2, "codecs": {"fp16": {"ratio": 0}}}, "'codecs.fp16.ratio' must be a number > 0"),
    ({"machines": 2, "codecs": {"fp16": {"speed": 3}}}, "'codecs.fp16.speed' is unknown"),
    ([1, 2], "a cluster is a JSON object"),
])
def test_bad_cluster_json_gives_clear_errors(data, message: str, tmp_path) -> None:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ClusterError, match=message) as info:
        ClusterSpec.from_json(path)
    if isinstance(data, dict) and "machines" in data:
        assert str(info.value).startswith(str(path))  # says which file


def test_cluster_json_round_trip_and_sources(tmp_path) -> None:
    c = ClusterSpec.from_dict({"machines": 8, "gpus_per_machine": 4, "nic_gbps": 100,
                           "server_machines": 2, "name": "x"})
    assert c.workers == 32
    path = tmp_path / "c.json"
    path.write_text(c.to_json())
    assert ClusterSpec.from_json(path) == c
    assert ClusterSpec.from_json(c.to_json()) == c
    assert ClusterSpec.from_json(json.loads(c.to_json())) == c
    with pytest.raises(ClusterError, match="cannot read cluster file"):
        ClusterSpec.from_json(tmp_path / "missing.json")
    with pytest.raises(ClusterError, match="not valid JSON"):
        ClusterSpec.from_json("{machines: 2}")


def test_bad_configs_are_refused() -> None:
    c = ClusterSpec(machines=2, workers_per_machine=2, server_machines=1)
    job = Job((1000,))
    with pytest.raises(ValueError, match="servers=2: the cluster has 1 server"):
        simulate(job, c, {"transport": "pushpull", "servers": 2})
    with pytest.raises(ValueError, match="reduce_root=3 is not a local worker 0..1"):
        simulate(job, c, {"intra": "root", "reduce_root": 3})
    with pytest.raises(ValueError, match="compression='zip' is not one of"):
        simulate(job, c, {"compression": "zip"})
    with pytest.raises(ValueError, match="streams=0 is outside 1..64"):
        simulate(job, c, {"streams": 0})
    with pytest.raises(ValueError, match="gradient sizes must be positive"):
        Job((10, 0))


def test_chunking_packs_small_and_splits_large() -> None:
    """The runtime's rule: a gradient fills the open chunk and continues in the next ones;
    a chunk is ready when its last gradient is (tests/sim/test_plan_shared.py compares
    with the runtime's plan itself)."""
    job = Job((100, 300, 700, 2500, 50, 50))
    sizes, ready = job.chunks(1000)
    assert sizes == [1000, 1000, 1000, 700]
    total = job.total_bytes
    assert ready == [1100 / total, 3600 / total, 3600 / total, 1.0]


# --------------------------------------------------------------------------- scale
def test_1024_gpus_simulate_fast() -> None:
    shapes_job = Job.from_model("resnet50", compute_ms=100)
    cluster = ClusterSpec(machines=128, workers_per_machine=8, server_machines=64, nic_gbps=100,
                      per_flow_gbps=25, gpus_per_switch=4, nic_switch=0, nvlink_gbps=200)
    flat = ClusterSpec(machines=1024, server_machines=256, nic_gbps=25)
    configs = [
        {},
        {"chunk_bytes": 64 * 1024, "streams": 8, "transport": "pushpull", "servers": 64,
         "intra": "scatter"},
        {"chunk_bytes": 64 * 1024, "streams": 4, "intra": "root", "reduce_root": 5},
    ]
    for c, cfgs in ((cluster, configs), (flat, [{}, {"chunk_bytes": 64 * 1024, "transport": "pushpull", "servers": 256}])):
        for cfg in cfgs:
            times = []
            for _ in range(5):  # a fresh job each time: no cached chunk plan
                job = Job(shapes_job.grad_bytes, compute_s=0.1)
                t0 = time.perf_counter()
                est = simulate(job, c, cfg)
                times.append(time.perf_counter() - t0)
            assert min(times) < 0.050, (cfg, times)  # a guard against blow-ups, not a benchmark
            assert est.step_s >= 0.1 and math.isfinite(est.step_s)


# ------------------------------------------------------------------------ objective
def test_simulated_objective_is_noisy_seeded_and_tunable() -> None:
    job = Job.from_model("resnet50", compute_ms=40)
    cluster = ClusterSpec(machines=8, workers_per_machine=2, server_machines=4, nic_gbps=25,
                      per_flow_gbps=5)
    obj = SimulatedObjective(job, cluster, noise=0.03, seed=7)
    again = SimulatedObjective(job, cluster, noise=0.03, seed=7)
    cfg = obj.space.default()
    draws = [obj(cfg) for _ in range(400)]
    assert draws == [again(cfg) for _ in range(400)]
    truth = obj.true(cfg)
    assert truth == pytest.approx(simulate(job, cluster, cfg).throughput)
    rel = [d / truth - 1 for d in draws]
    assert abs(statistics.mean(rel)) < 0.01
    assert 0.02 < statistics.stdev(rel) < 0.04
    long = [obj(cfg, iterations=16) / truth - 1 for _ in range(400)]
    assert statistics.stdev(long) < 0.4 * statistics.stdev(rel)
    assert obj.calls == 800
    assert SimulatedObjective(job, cluster, noise=0.0)(cfg) == truth
    # there is something to tune: a sampled config beats the default by a lot
    rng = random.Random(0)
    pool = [obj.space.sample(rng) for _ in range(200)] + [cfg]
    best, value = obj.best(pool)
    assert value > 1.5 * truth
    assert obj.space.contains(best)


# --------------------------------------------------------------------------- codecs
def test_codec_calibration_times_the_real_codecs() -> None:
    classes = _codec_classes()
    if not classes:
        pytest.skip("autotune.runtime.codecs is not importable yet")
    try:
        measured = calibrate_codecs(numel=1 << 16, repeats=2)
        assert "fp16" in measured and "topk" in measured
        for name, cost in measured.items():
            assert cost.ratio > 0
            if name != "none":
                assert 0 < cost.encode_gbps < math.inf and 0 < cost.decode_gbps < math.inf
        codec = classes["topk"](world_size=2)
        assert measured["topk"].ratio == pytest.approx(codec.ratio(1 << 16))
        assert measured["fp16"].ratio == pytest.approx(0.5)
        assert measured["topk"].summable is False and measured["fp16"].summable is True
        # calibrated numbers are what the simulator now charges
        job = Job.from_model("resnet50")
        est = simulate(job, ClusterSpec(machines=2), {"compression": "fp16", "chunk_bytes": MiB,
                                                      "compress_min_bytes": 64 * 1024})
        per_byte = 8 / (measured["fp16"].encode_gbps * 1e9) + 8 / (measured["fp16"].decode_gbps * 1e9)
        assert est.breakdown["codec_s"] == pytest.approx(job.total_bytes * per_byte)
    finally:
        reset_calibration()
