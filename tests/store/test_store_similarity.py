"""Model fingerprints, graph edit distance between jobs, nearest runs and warm start."""

from __future__ import annotations

import random
import time

import networkx as nx
import pytest
import torch
from torch import nn

from autotune.tuning.space import SearchSpace
from autotune.store.warmstart import warm_start_configs
from autotune.store.fingerprint import MAX_NODES, fingerprint, layers_graph, model_graph
from autotune.store.similarity import (Candidate, Matcher, Summary, assignment_bound, edit_distance,
                                       job_distance, lower_bound)
from store_helpers import CNN, FACTS, TRANSFORMER, WORLD, add_run, cluster, model

SLOW_OK = {"timeout": 5.0, "budget": None}  # the machine is shared: no time pressure here


# ------------------------------------------------------------ model graphs
class Bottleneck(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.a, self.na = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c)
        self.b, self.nb = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(x + self.nb(self.b(torch.relu(self.na(self.a(x))))))


def resnetish(depths=(2, 2), width=16, classes=10) -> nn.Module:
    layers: list[nn.Module] = [nn.Conv2d(3, width, 3), nn.BatchNorm2d(width)]
    c = width
    for i, d in enumerate(depths):
        if i:
            layers += [nn.Conv2d(c, 2 * c, 1, stride=2), nn.BatchNorm2d(2 * c)]
            c *= 2
        layers += [Bottleneck(c) for _ in range(d)]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, classes)]
    return nn.Sequential(*layers)


class Untraceable(nn.Module):
    """Data-dependent control flow: torch.fx cannot trace it."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(32, 64)
        self.second = nn.Linear(64, 8)
        self.scale = nn.Parameter(torch.ones(8))

    def forward(self, x):
        h = self.first(x)
        if h.sum() > 0:
            h = torch.relu(h)
        return self.second(h) * self.scale


def test_fx_graph_follows_the_data_and_collapses_repeats():
    g = model_graph(resnetish((2, 6)))
    assert g.graph["source"] == "fx"
    labels = [d["label"] for _, d in g.nodes(data=True)]
    assert labels[0] == "Conv2d:9"  # 3*16*3*3 + 16 = 448 elements -> bucket 9
    assert labels[-1] == "Linear:9"  # 32*10 + 10 = 330 -> bucket 9
    blocks = [d for _, d in g.nodes(data=True) if d["count"] > 1]
    assert blocks, "the repeated residual blocks were not collapsed"
    assert g.number_of_nodes() < 20
    # residual connections: the data flow is not just a chain
    assert nx.is_directed_acyclic_graph(g) and g.number_of_edges() >= g.number_of_nodes() - 1


def test_untraceable_model_falls_back_to_the_module_tree():
    g = model_graph(Untraceable())
    assert g.graph["source"] == "modules"
    assert [d["label"] for _, d in g.nodes(data=True)] == ["Untraceable:4", "Linear:12", "Linear:10"]
    assert list(g.edges) == [(0, 1), (1, 2)]


def test_frozen_and_shared_parameters_count_once():
    lin = nn.Linear(100, 100)
    frozen = nn.Linear(100, 100).requires_grad_(False)
    g = model_graph(nn.Sequential(lin, nn.ReLU(), frozen, lin))
    assert [d["elements"] for _, d in g.nodes(data=True)] == [10100]


def test_deep_distinct_models_are_cut_to_max_nodes():
    layers = [(f"Layer{i}", 1000 + 37 * i) for i in range(500)]  # nothing repeats
    g = layers_graph(layers)
    assert g.number_of_nodes() == MAX_NODES
    assert sum(d["elements"] for _, d in g.nodes(data=True)) == sum(n for _, n in layers)
    assert nx.is_directed_acyclic_graph(g)


def test_fingerprint_ignores_node_names_but_not_labels():
    assert fingerprint(cluster(4, names="m")) == fingerprint(cluster(4, names="host-"))
    assert fingerprint(cluster(4)) != fingerprint(cluster(4, bandwidth="25G"))
    assert fingerprint(cluster(4)) != fingerprint(cluster(5))
    assert fingerprint(model(CNN)) == fingerprint(model(list(CNN)))
    assert fingerprint(model_graph(resnetish((2, 6)))) == fingerprint(model_graph(resnetish((2, 6))))


# ------------------------------------------------------------- distances
def _random_dag(rng: random.Random) -> Summary:
    kinds = ["Linear", "Conv2d", "LayerNorm"]
    layers = [(rng.choice(kinds), rng.choice([100, 1000, 5000])) for _ in range(rng.randint(1, 5))]
    n = len(layers)
    edges = {(i, i + 1) for i in range(n - 1)} | {(i, j) for i in range(n) for j in range(i + 2, n)
                                                  if rng.random() < 0.2}
    return Summary.of(layers_graph(layers, edges))


def _random_cluster(rng: random.Random) -> Summary:
    g = cluster(rng.randint(1, 4), gpus=rng.choice([4, 8]))
    for u, v in list(g.edges):
        if rng.random() < 0.3:
            g.remove_edge(u, v)
        elif rng.random() < 0.3:
            g.edges[u, v]["label"] = "net:100G"
    return Summary.of(g)


@pytest.mark.parametrize("make", [_random_dag, _random_cluster])
def test_bounds_bracket_the_exact_edit_distance(make):
    rng = random.Random(5)
    for _ in range(20):
        a, b = make(rng), make(rng)
        cost, complete = edit_distance(a, b, timeout=5.0)
        assert complete
        assert lower_bound(a, b) - 1e-9 <= cost <= assignment_bound(a, b) + 1e-9


def test_identical_is_zero_one_layer_changed_is_near_and_another_architecture_far():
    base = model(CNN)
    changed = list(CNN)
    changed[-1] = ("Linear", 65_000)  # a bigger classifier head
    t = cluster(2)
    assert job_distance(base, t, model(list(CNN)), cluster(2, names="x")) == 0.0
    near = job_distance(base, t, model(changed), t)
    far = job_distance(base, t, model(TRANSFORMER), t)
    assert 0.0 < near < far


def test_topology_distance_grows_with_the_difference():
    m = model(CNN)
    d3 = job_distance(m, cluster(2), m, cluster(3))
    d8 = job_distance(m, cluster(2), m, cluster(8))
    bw = job_distance(m, cluster(2), m, cluster(2, bandwidth="100G"))
    assert 0.0 < d3 < d8 and 0.0 < bw


def test_time_limit_is_respected_and_a_result_still_comes_back():
    rng = random.Random(1)
    kinds = ["Linear", "Conv2d", "LayerNorm", "Embedding"]
    big_a = Summary.of(layers_graph([(rng.choice(kinds), rng.randint(1, 10**6)) for _ in range(40)], max_nodes=40))
    big_b = Summary.of(layers_graph([(rng.choice(kinds), rng.randint(1, 10**6)) for _ in range(40)], max_nodes=40))
    edit_distance(Summary.of(model(CNN)), Summary.of(model(TRANSFORMER)), timeout=1.0)  # warm up
    t0 = time.perf_counter()
    cost, complete = edit_distance(big_a, big_b, timeout=0.1)
    took = time.perf_counter() - t0
    assert not complete and cost is not None
    assert lower_bound(big_a, big_b) <= cost <= big_a.size + big_b.size
    assert took < 2.0  # 0.1 s limit plus one step of the search, on a loaded machine


def test_rank_prunes_with_lower_bounds():
    q = Summary.of(model(CNN))
    t = Summary.of(cluster(2))
    cands = [Candidate("same", q, t, 1)] + [
        Candidate(f"other{i}", Summary.of(layers_graph([("Embedding", 10**7 + i)] * (i + 3))), t, 1)
        for i in range(20)]
    m = Matcher()
    ranked = m.rank(q, t, cands, k=1, timeout=5.0, budget=None)
    assert [(c.key, d) for c, d in ranked] == [("same", 0.0)]
    assert m.comparisons == 0  # an exact match and lower bounds settle it


# ------------------------------------------------------------ the store
def test_nearest_ranks_known_answers(store):
    changed = list(CNN)
    changed[-1] = ("Linear", 65_000)
    same = add_run(store, model(CNN), cluster(4), {"streams": 1}, 10.0, job="same")
    near = add_run(store, model(changed), cluster(4), {"streams": 2}, 10.0, job="near")
    other_cluster = add_run(store, model(CNN), cluster(8), {"streams": 3}, 10.0, job="cluster")
    far = add_run(store, model(TRANSFORMER), cluster(2), {"streams": 4}, 10.0, job="far")
    add_run(store, model(CNN), cluster(4), None, None, job="failed", status="failed")
    got = store.nearest(model(CNN), cluster(4, names="h"), k=4, **SLOW_OK)
    assert [r["id"] for r, _ in got][:2] == [same, near]
    assert set(r["id"] for r, _ in got) == {same, near, other_cluster, far}
    dists = [d for _, d in got]
    assert dists[0] == 0.0 and dists == sorted(dists) and dists[1] > 0
    assert dict((r["id"], d) for r, d in got)[far] == max(dists)
    # failed runs only when asked; a run is not its own neighbour
    assert len(store.nearest(model(CNN), cluster(4), k=10, finished_only=False, **SLOW_OK)) == 5
    sim = store.similar(same, k=1, **SLOW_OK)
    assert [r["id"] for r, _ in sim] == [near]


def test_runs_sharing_graphs_come_best_score_first(store):
    ids = [add_run(store, model(CNN), cluster(2), {"streams": s}, float(score))
           for s, score in ((1, 5), (2, 9), (3, 7))]
    got = store.nearest(model(CNN), cluster(2), k=2, **SLOW_OK)
    assert [r["id"] for r, _ in got] == [ids[1], ids[2]]


ALIKE = {"unit": "samples/s", "machines": 2}  # what add_run records: WORLD, samples/s


def test_warm_start_puts_the_stored_best_first(store):
    space = SearchSpace.build(k_max=2, workers_per_machine=4, max_streams=8)
    facts = {"k_max": 2, "workers_per_machine": 4}
    changed = list(CNN)
    changed[-1] = ("Linear", 65_000)
    best = {"streams": 6, "chunk_bytes": 1 << 20, "transport": "pushpull", "servers": 2,
            "intra": "root", "reduce_root": 3, "compression": "none"}
    add_run(store, model(TRANSFORMER), cluster(4), {**best, "streams": 1}, 99.0, facts=facts)
    add_run(store, model(changed), cluster(4), {**best, "streams": 12, "chunk_bytes": 3 << 20},
            50.0, facts=facts)
    add_run(store, model(CNN), cluster(4), best, 20.0, facts=facts)
    add_run(store, model(CNN), cluster(4), {**best, "compression": "topk"}, 10.0, facts=facts)
    warm = warm_start_configs(store, model(CNN), cluster(4), space, k=3, **ALIKE, **SLOW_OK)
    assert warm[0] == space.validate(best)
    # the near run's config is projected into the new space (streams clipped to 8,
    # 3 MiB chunk snapped to 4 MiB, the nearest in log scale); the lossy one is dropped: topk is not allowed here
    assert warm[1] == space.validate({**best, "streams": 8, "chunk_bytes": 4 << 20})
    assert len(warm) == 2 and all(space.contains(c) for c in warm)


def test_warm_start_from_an_empty_store_is_empty(store):
    assert warm_start_configs(store, model(CNN), cluster(2), SearchSpace.build(), **ALIKE) == []


def test_warm_start_deduplicates(store):
    space = SearchSpace.build(max_streams=4)
    for s in (5, 6, 4):  # all clip to streams=4 in this space
        add_run(store, model(CNN), cluster(2), {"streams": s}, float(s))
    assert warm_start_configs(store, model(CNN), cluster(2), space, k=3, **ALIKE, **SLOW_OK) == [
        space.validate({"streams": 4})]


def test_warm_start_only_from_alike_jobs(store):
    from autotune.store.warmstart import MAX_DISTANCE

    space = SearchSpace.build(max_streams=8)
    alike = add_run(store, model(CNN), cluster(2), {"streams": 2}, 1.0)
    # each differs from the job in one way, and each has a better score than the alike run
    unlike = {
        "another model": add_run(store, model(TRANSFORMER), cluster(2), {"streams": 3}, 9.0),
        "simulated": add_run(store, model(CNN), cluster(2), {"streams": 4}, 9.0,
                             unit="samples/s", simulated=True),
        "goodput": add_run(store, model(CNN), cluster(2), {"streams": 5}, 9.0,
                           unit="goodput samples/s"),
        "other servers": add_run(store, model(CNN), cluster(2), {"streams": 6}, 9.0,
                                 facts={"k_max": 2, "workers_per_machine": 1}),
        "one machine": add_run(store, model(CNN), cluster(2), {"streams": 7}, 9.0,
                               world={**WORLD, "machines": 1}),
        "no facts (old run)": add_run(store, model(CNN), cluster(2), {"streams": 8}, 9.0,
                                      facts={}),
    }
    distance = dict((r["id"], d) for r, d in store.nearest(model(CNN), cluster(2), k=10, **SLOW_OK))
    assert distance[alike] == 0 and distance[unlike["another model"]] > MAX_DISTANCE
    warm = warm_start_configs(store, model(CNN), cluster(2), space, k=10, **ALIKE, **SLOW_OK)
    assert warm == [space.validate({"streams": 2})], (warm, unlike)
    # the same filters, one at a time, on nearest
    near = store.nearest(model(CNN), cluster(2), k=10, unit="goodput samples/s", **SLOW_OK)
    assert [r["id"] for r, _ in near] == [unlike["goodput"]]
    near = store.nearest(model(CNN), cluster(2), k=10, max_distance=MAX_DISTANCE, **SLOW_OK)
    assert unlike["another model"] not in {r["id"] for r, _ in near} and len(near) == 6


def test_samples_per_s_and_it_per_s_warm_start_each_other_ranked_by_speedup(store):
    """Issue 65: an offline ``autotune tune`` scores it/s, a job with ``samples_per_step``
    samples/s; each warms the other. Their scores differ by the job's batch, so runs of one
    model and cluster are ranked by their best's speed-up over their own default."""
    space = SearchSpace.build(max_streams=8)
    # samples/s: a high score (batch 32), a small speed-up; it/s: a low score, a large one
    for streams, best, default, unit in ((2, 32 * 11.0, 32 * 10.0, "samples/s"),
                                         (4, 15.0, 10.0, "it/s")):
        rid = store.start_run(job="job", world=WORLD, backend="gloo", model_graph=model(CNN),
                              topology_graph=cluster(2), space_facts=FACTS, unit=unit)
        store.finish_run(rid, best_config={"streams": streams}, best_score=best,
                         default_score=default)
    for unit in ("samples/s", "it/s"):
        warm = warm_start_configs(store, model(CNN), cluster(2), space, k=10, unit=unit,
                                  machines=2, **SLOW_OK)
        assert warm == [space.validate({"streams": 4}), space.validate({"streams": 2})], unit
    # goodput and simulated runs are of other kinds, in either unit
    from autotune.units import alike_units

    assert alike_units("it/s") == ("it/s", "samples/s")
    assert alike_units("goodput samples/s") == ("goodput samples/s", "goodput it/s")
    assert alike_units("simulated it/s") == ("simulated it/s", "simulated samples/s")


def test_a_loopback_session_is_not_warm_started_by_a_simulated_32_gpu_run(tmp_path):
    """The defect of issue 26: a 2-worker loopback session took its first trials from
    simulated 32-GPU runs of another model (distance 1.76-1.80); on a fresh store the
    default's trial was labelled warm."""
    from types import SimpleNamespace

    from autotune.offline.simulated import cluster_graph
    from autotune.leader.record import SessionRun
    from autotune.store import Store
    from autotune.store.fingerprint import model_graph
    from autotune.tuning.tuner import Tuner

    mlp = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
    db = tmp_path / "a.db"
    with Store(db) as store:
        for streams in (8, 12):
            rid = store.start_run(job="tune-sim:resnet50", world={"machines": 4},
                                  backend="simulated", model_graph=model(CNN),
                                  topology_graph=cluster_graph(4, 8, 0),
                                  space_facts={"k_max": 0, "workers_per_machine": 1},
                                  simulated=True)
            store.finish_run(rid, status="finished", best_config={"streams": streams},
                             best_score=1e6)
    space = SearchSpace.build()
    info = SimpleNamespace(workers=[0, 1], servers=[], n_machines=1, workers_per_machine=2)
    run = SessionRun(db, "loopback")
    run.open(mlp, info, "gloo", space, "it/s")
    warm = run.warm_start(space)
    assert warm == space.seeds()  # nothing from the simulated runs
    run.store.close()
    tuner = Tuner(space, budget=10, warm_start=warm)
    assert tuner.ask().technique == "default"
    # an alike earlier session (same model, world and unit) does warm-start it
    with Store(db) as store:
        rid = store.start_run(job="loopback", world={"machines": 1}, backend="gloo",
                              model_graph=model_graph(mlp), topology_graph=cluster_graph(1, 2, 0),
                              space_facts=dict(space.facts), unit="it/s")
        store.finish_run(rid, status="finished", best_config={"streams": 3}, best_score=5.0)
    run = SessionRun(db, "loopback")
    run.open(mlp, info, "gloo", space, "it/s")
    assert run.warm_start(space)[0] == space.validate({"streams": 3})
    run.store.close()


def test_big_clusters_are_compared_coarsened():
    def big(machines: int, servers: int) -> nx.Graph:
        g = cluster(machines, gpus=8)
        for s in range(servers):
            g.add_node(f"s{s}", kind="server", label="server")
            g.add_edges_from((f"s{s}", f"m{i}", {"kind": "net", "label": "net:10G"}) for i in range(machines))
        return g

    a, b, c = Summary.of(big(100, 8)), Summary.of(big(120, 9)), Summary.of(big(300, 8))
    assert a.fp == b.fp  # same size buckets: alike
    assert (a.nodes, a.edges) == (2, 2)  # machines x7 with a self-loop, servers x4, one link
    m = Matcher()
    assert m.graph_distance(a, c, timeout=5.0) > 0.0
    t0 = time.perf_counter()
    assert job_distance(model(CNN), big(60, 2), model(CNN), big(200, 2)) > 0
    assert time.perf_counter() - t0 < 30


class _TinyLM(nn.Module):
    """A 2-layer transformer LM, width 128: the kind of small job issue 48 ran."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 128)
        self.body = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(128, 4, 256, batch_first=True), 2)
        self.head = nn.Linear(128, 100)

    def forward(self, x):
        return self.head(self.body(self.emb(x)))


def test_an_unrelated_job_on_the_same_machine_does_not_warm_start(tmp_path, monkeypatch):
    """Issue 48: three small framework jobs on one store, all named ``session``: the third
    warm-started from an unrelated one. Small models of unrelated families are only 0.5
    apart; another job's run must be as close as a variant of one family, and the default
    name (script and model class) tells two scripts apart. The same job (same name) at
    that distance still warm-starts."""
    from types import SimpleNamespace

    from autotune.offline.simulated import cluster_graph
    from autotune.leader.record import SessionRun, job_name
    from autotune.store import Store
    from autotune.store.similarity import job_distance

    cnn = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.Conv2d(16, 32, 3), nn.ReLU(),
                        nn.Flatten(), nn.Linear(32 * 28 * 28, 10))
    lm = _TinyLM()
    topo = cluster_graph(1, 2, 0)
    assert job_distance(model_graph(cnn), topo, model_graph(lm), topo) <= 0.5  # close enough today
    monkeypatch.setenv("AUTOTUNE_JOB", "/jobs/train_cnn.py")
    cnn_job = job_name(None, cnn)
    monkeypatch.setenv("AUTOTUNE_JOB", "/jobs/train_lm.py")
    lm_job = job_name(None, lm)
    assert (cnn_job, lm_job) == ("train_cnn.py:Sequential", "train_lm.py:_TinyLM")
    assert job_name("mine", lm) == "mine"

    space = SearchSpace.build()
    db = tmp_path / "w.db"
    with Store(db) as store:
        rid = store.start_run(job=cnn_job, world={"machines": 1}, backend="gloo",
                              model_graph=model_graph(cnn), topology_graph=topo,
                              space_facts=dict(space.facts), unit="it/s")
        store.finish_run(rid, status="finished", best_config={"streams": 5}, best_score=5.0)
    info = SimpleNamespace(workers=[0, 1], servers=[], n_machines=1, workers_per_machine=2)
    run = SessionRun(db, None, lm)
    assert run.job == lm_job
    run.open(lm, info, "gloo", space, "it/s")
    assert run.warm_start(space) == space.seeds()  # nothing from the CNN's run
    run.store.close()
    # the same name at the same distance (a renamed model, say) does warm-start
    run = SessionRun(db, cnn_job, lm)
    run.open(lm, info, "gloo", space, "it/s")
    assert run.warm_start(space)[0] == space.validate({"streams": 5})
    run.store.close()
