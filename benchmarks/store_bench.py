"""How fast the results store finds the nearest earlier jobs among 10,000 runs.

Builds (once, cached under benchmarks/results/) a store of 10,000 finished runs over
~100 distinct model graphs (the zoo's eight models and variants of each: a layer
resized, a layer dropped, a layer added) and 24 cluster graphs, then times
``Store.nearest(model, topology, k=3)`` for four kinds of query:

* ``exact``: a stored model on a stored cluster;
* ``near``: a zoo model with one layer resized (not stored) on a stored cluster;
* ``new-cluster``: a stored model on a cluster no run used (12 machines);
* ``novel``: a model like none stored (30 distinct MLP layers).

Each is timed cold (a fresh ``Store``: open, read the graphs, no cached distances)
and warm (the same ``Store`` again), median of ``--repeats``; cold is reported as wall
time and as this process's CPU time (the machine is shared: wall time includes waiting
for a core, and the exact-GED budget is wall time, so a loaded machine refines less). The reference, measured
in the same run, is brute force: the same edit distance (same per-comparison time
limit) against every distinct stored (model, cluster) pair, without pruning or budget. The ratio is reference time / ours, and ``same_top1`` says
whether both found the same nearest distance.

    .venv/bin/python benchmarks/store_bench.py [--runs 10000] [--repeats 5]

Target (issue 5): a look-up under 0.5 s with 10,000 runs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import networkx as nx

from autotune.store import Store
from autotune.store.fingerprint import layers_graph, model_graph, normalize
from autotune.store.location import shown
from autotune.store.similarity import TIMEOUT_S, Matcher, Summary

RESULTS = Path(__file__).resolve().parent / "results"
ZOO = ["resnet50", "resnet101", "vgg16", "bert-base", "bert-large", "gpt2", "gpt2-medium",
       "transformer-base"]


def cluster(machines: int, gpus: int, bw: str) -> nx.Graph:
    g = nx.Graph()
    for i in range(machines):
        g.add_node(i, kind="machine", label=f"machine:{gpus}gpu")
    for i in range(machines):
        for j in range(i + 1, machines):
            g.add_edge(i, j, kind="net", label=f"net:{bw}")
    return g


def variant(g: nx.DiGraph, rng: random.Random) -> nx.DiGraph:
    """``g`` with one layer resized, dropped, or duplicated."""
    h = normalize(g)
    n = rng.randrange(h.number_of_nodes())
    op = rng.choice(["resize", "drop", "add"]) if h.number_of_nodes() > 2 else "resize"
    if op == "resize":
        d = h.nodes[n]
        d["label"] = f"{d['kind']}:{rng.randint(5, 28)}"
    elif op == "drop":
        preds, succs = list(h.predecessors(n)), list(h.successors(n))
        h.remove_node(n)
        h.add_edges_from((p, s, {"kind": "data", "label": "data"}) for p in preds for s in succs)
    else:
        new = max(h.nodes) + 1
        h.add_node(new, **{**h.nodes[n], "name": str(new)})
        for s in list(h.successors(n)):
            h.remove_edge(n, s)
            h.add_edge(new, s, kind="data", label="data")
        h.add_edge(n, new, kind="data", label="data")
    return h


def base_models() -> dict[str, nx.DiGraph]:
    from autotune import zoo

    return {name: model_graph(zoo.build(name)) for name in ZOO}


def build(path: Path | str, runs: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    bases = base_models()
    models = list(bases.values())
    for g in bases.values():
        models += [variant(g, rng) for _ in range(11)]
    topologies = [cluster(m, gpus, bw) for m in (1, 2, 3, 4, 6, 8) for gpus in (4, 8)
                  for bw in ("10G", "100G")]
    t0 = time.perf_counter()
    with Store(path) as s:
        for i in range(runs):
            m, t = rng.choice(models), rng.choice(topologies)
            rid = s.start_run(job=f"job{i}", world={"workers": 8, "servers": 0, "machines": 2},
                              backend="gloo", model_graph=m, topology_graph=t, space_facts={})
            s.finish_run(rid, status="finished", best_config={"streams": 1 + i % 16},
                         best_score=rng.uniform(1, 100), default_score=1.0)
        distinct = s.query("select count(*) n from (select distinct model_fp, topology_fp "
                           "from runs) as pairs")[0]["n"]
        graphs = s.query("select kind, count(*) n from graphs group by kind")
    return {"runs": runs, "build_s": time.perf_counter() - t0, "distinct_pairs": distinct,
            "graphs": {g["kind"]: g["n"] for g in graphs}}


def queries(bases: dict[str, nx.DiGraph]) -> dict[str, tuple[nx.Graph, nx.Graph]]:
    rng = random.Random(123)
    changed = normalize(bases["bert-base"])
    first = next(iter(changed.nodes))
    changed.nodes[first]["label"] = "Embedding:27"
    mlp = layers_graph([(f"Linear{i}", 1000 * (i + 1)) for i in range(30)])
    del rng
    return {
        "exact": (bases["resnet50"], cluster(4, 8, "10G")),
        "near": (changed, cluster(2, 8, "100G")),
        "new-cluster": (bases["gpt2"], cluster(12, 8, "25G")),
        "novel": (mlp, cluster(3, 4, "10G")),
    }


def brute_force(path: Path, m: nx.Graph, t: nx.Graph, k: int) -> tuple[float, list[float]]:
    """Every distinct stored pair, full edit distance, no lower bounds, no budget."""
    t0 = time.perf_counter()
    with Store(path) as s:
        groups = s.query("select model_fp, topology_fp from runs where status = 'finished' "
                         "group by model_fp, topology_fp")
        summ = s.summaries([g["model_fp"] for g in groups] + [g["topology_fp"] for g in groups])
        qm, qt = Summary.of(m), Summary.of(t)
        matcher = Matcher()
        dists = sorted(matcher.graph_distance(qm, summ[g["model_fp"]], timeout=TIMEOUT_S)
                       + matcher.graph_distance(qt, summ[g["topology_fp"]], timeout=TIMEOUT_S)
                       for g in groups)
    return time.perf_counter() - t0, dists[:k]


FRESH = """
import time, networkx as nx
from autotune.store import Store
from autotune.store.fingerprint import layers_graph
g = layers_graph([("Linear", 1000 * (i + 1)) for i in range(20)])
t = nx.Graph(); t.add_node(0, kind="machine", label="machine:8gpu")
t0, c0 = time.perf_counter(), time.process_time()
Store(PATH).nearest(g, t)
print(time.perf_counter() - t0, time.process_time() - c0)
"""


def fresh_process(path: Path) -> tuple[float, float]:
    """(wall, cpu) of the first look-up in a new process: includes importing scipy."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", FRESH.replace("PATH", repr(str(path)))],
                         capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), float(out[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--rebuild", action="store_true", help="rebuild the cached database")
    ap.add_argument("--db", default=None, metavar="URL",
                    help="a PostgreSQL database to measure instead of the cached SQLite file "
                         "(an empty one is filled first; its meta is kept beside the JSON)")
    ap.add_argument("--json", type=Path, default=None,
                    help="where the results go (default: results/store_bench.json, "
                         "store_bench_postgresql.json with --db)")
    args = ap.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = args.db or RESULTS / f"store_bench_{args.runs}.db"
    meta_path = RESULTS / (f"store_bench_{args.runs}_postgresql.json" if args.db
                           else f"store_bench_{args.runs}.json")
    if args.db:
        with Store(args.db) as s:
            empty = not s.runs(limit=1)
        if empty or not meta_path.exists():
            print(f"building {args.runs} runs in {shown(args.db)} ...", file=sys.stderr)
            meta_path.write_text(json.dumps(build(args.db, args.runs)))
    elif args.rebuild or not path.exists() or not meta_path.exists():
        for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            p.unlink(missing_ok=True)
        print(f"building {args.runs} runs in {path} ...", file=sys.stderr)
        meta = build(path, args.runs)
        meta_path.write_text(json.dumps(meta))
    meta = json.loads(meta_path.read_text())
    bases = base_models()
    qs = queries(bases)

    t0 = time.perf_counter()
    Store(path).close()
    open_s = time.perf_counter() - t0

    results = {}
    for name, (m, t) in qs.items():
        cold, cold_cpu, warm = [], [], []
        top = []
        for _ in range(args.repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            s = Store(path)
            got = s.nearest(m, t, k=args.k)
            cold.append(time.perf_counter() - t0)
            cold_cpu.append(time.process_time() - c0)
            t0 = time.perf_counter()
            s.nearest(m, t, k=args.k)
            warm.append(time.perf_counter() - t0)
            s.close()
            top = [d for _, d in got]
        ref_s, ref_top = brute_force(path, m, t, args.k)
        results[name] = {
            "cold_median_s": statistics.median(cold), "warm_median_s": statistics.median(warm),
            "cold_cpu_median_s": statistics.median(cold_cpu),
            "cold_all_s": cold, "reference_s": ref_s,
            "ratio": ref_s / statistics.median(cold),
            "top_k": top, "reference_top_k": ref_top,
            "same_top1": bool(top and ref_top and abs(top[0] - ref_top[0]) < 1e-9),
        }
        print(f"{name:12s} cold {statistics.median(cold) * 1000:6.1f} ms "
              f"(cpu {statistics.median(cold_cpu) * 1000:5.1f} ms)  warm "
              f"{statistics.median(warm) * 1000:7.1f} ms  brute force {ref_s:6.2f} s  "
              f"ratio {ref_s / statistics.median(cold):6.1f}x  top-{args.k} {['%.3f' % d for d in top]}"
              f"  (brute {['%.3f' % d for d in ref_top]})")
    fresh = [fresh_process(path) for _ in range(3)]
    fresh_wall = statistics.median(f[0] for f in fresh)
    fresh_cpu = statistics.median(f[1] for f in fresh)
    print(f"first look-up in a fresh process (imports scipy once): {fresh_wall * 1000:.0f} ms "
          f"(cpu {fresh_cpu * 1000:.0f} ms)")
    worst = max(r["cold_median_s"] for r in results.values())
    worst_cpu = max(r["cold_cpu_median_s"] for r in results.values())
    print(f"\n{meta['runs']} runs, {meta['distinct_pairs']} distinct (model, cluster) pairs, "
          f"graphs {meta['graphs']}; open {open_s * 1000:.0f} ms; slowest cold look-up "
          f"{worst * 1000:.0f} ms wall, {worst_cpu * 1000:.0f} ms cpu "
          f"(target < 500 ms: {'met' if worst < 0.5 else 'NOT met'} on wall time, "
          f"{'met' if worst_cpu < 0.5 else 'NOT met'} on cpu time; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus)")
    out = args.json or RESULTS / ("store_bench_postgresql.json" if args.db
                                  else "store_bench.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "database": meta, "kind": "postgresql" if args.db else "sqlite", "open_s": open_s, "queries": results, "k": args.k,
        "fresh_process_first_lookup": {"wall_s": fresh_wall, "cpu_s": fresh_cpu},
        "repeats": args.repeats, "target_s": 0.5, "met_wall": worst < 0.5,
        "met_cpu": worst_cpu < 0.5,
        "machine": {"cpus": os.cpu_count(), "loadavg": list(os.getloadavg()),
                    "time": time.strftime("%Y-%m-%d %H:%M:%S")},
    }, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
