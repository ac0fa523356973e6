"""Helpers for the results-store tests: small hand-built graphs and the worker of the
multi-process write test (importable, so spawned processes can run it)."""

from __future__ import annotations

import traceback
from typing import Any

import networkx as nx

from autotune.store.fingerprint import layers_graph

# A made-up "ResNet-ish" and "transformer-ish" layer list: (kind, gradient elements).
CNN = [("Conv2d", 1728), ("BatchNorm2d", 128)] + [("Conv2d", 36864), ("BatchNorm2d", 128)] * 4 + [
    ("Conv2d", 73728), ("BatchNorm2d", 256), ("Conv2d", 147456), ("BatchNorm2d", 256),
    ("Linear", 1290)]
TRANSFORMER = [("Embedding", 3_000_000)] + [
    ("Linear", 590_000), ("Linear", 590_000), ("Linear", 590_000), ("Linear", 590_000),
    ("LayerNorm", 1536), ("Linear", 2_360_000), ("Linear", 2_360_000), ("LayerNorm", 1536)] * 6 + [
    ("Linear", 590_000)]


#: A finished run as schema versions 5 and 6 stored one (for ``old_store``).
OLD_FINISHED_RUN = (
    "insert into runs (id, created, status, job, model_fp, topology_fp, best_config, "
    "best_score, default_score, simulated, world, space_facts, unit) values (1, "
    "'2024-01-01T00:00:00.000+00:00', 'finished', 'old', 'aa', 'bb', '{\"streams\": 2}', "
    "6209.0, 3833.0, 0, '{}', '{}', 'samples/s')")


def old_store(path: Any, version: int, run_sql: str) -> None:
    """A store file as schema ``version`` left it (the migrations up to it), holding the
    run that ``run_sql`` inserts: what a migration test opens."""
    import sqlalchemy as sa

    from autotune.store import schema
    from autotune.store.sqltext import sql

    engine = sa.create_engine(sa.engine.URL.create("sqlite", database=str(path)))
    with engine.begin() as c:
        for v in range(version):
            schema.MIGRATIONS[v](c)
        sql(c, "update meta set value = ? where key = 'schema_version'", [str(version)])
        sql(c, run_sql)
    engine.dispose()


def model(layers: list[tuple[str, int]]) -> nx.DiGraph:
    return layers_graph(layers)


def cluster(machines: int, gpus: int = 8, bandwidth: str = "10G", names: str = "m") -> nx.Graph:
    """Machines as nodes (label machine:<n>gpu), every pair linked (label net:<bw>)."""
    g = nx.Graph()
    for i in range(machines):
        g.add_node(f"{names}{i}", kind="machine", label=f"machine:{gpus}gpu")
    for i in range(machines):
        for j in range(i + 1, machines):
            g.add_edge(f"{names}{i}", f"{names}{j}", kind="net", label=f"net:{bandwidth}")
    return g


WORLD = {"workers": 4, "servers": 0, "machines": 2}
FACTS = {"k_max": 0, "workers_per_machine": 1}  # SearchSpace.build()'s


def add_run(store: Any, model_graph: nx.Graph, topology: nx.Graph, best: dict | None,
            score: float | None = 1.0, job: str = "job", status: str = "finished", *,
            facts: dict = FACTS, world: dict = WORLD, unit: str = "samples/s",
            simulated: bool = False) -> int:
    rid = store.start_run(job=job, world=world, backend="gloo", model_graph=model_graph,
                          topology_graph=topology, space_facts=facts, unit=unit,
                          simulated=simulated)
    store.finish_run(rid, status=status, best_config=best, best_score=score, default_score=0.5)
    return rid


def closing_status(worker: int, run: int) -> str:
    """How a concurrent writer closes its run ``run``: finished, failed or aborted."""
    return ("finished", "failed", "aborted")[(worker + run) % 3]


def write_worker(path: str, worker: int, runs: int, trials: int, barrier: Any, errors: Any) -> None:
    """One of the concurrent writers: open the (maybe not yet existing) store at the same
    moment as the others, then write runs and trials one short transaction at a time,
    reading in between (the latest runs, the nearest runs as a warm start does), and close
    each run as :func:`closing_status` says."""
    try:
        from autotune.store import Store

        barrier.wait(timeout=120)
        store = Store(path)
        g = model(CNN if worker % 2 else TRANSFORMER)
        t = cluster(2 + worker % 3)
        for r in range(runs):
            rid = store.start_run(job=f"w{worker}", world=WORLD, backend="gloo", model_graph=g,
                                  topology_graph=t, space_facts={"worker": worker})
            for i in range(trials):
                store.add_trial(rid, number=i, technique="grid", config={"streams": 1 + i % 16},
                                iterations=3, score=float(worker * 1000 + r * 100 + i),
                                wall_time=0.01)
            store.runs(limit=3)
            store.nearest(g, t, 2)
            status = closing_status(worker, r)
            if status == "aborted":
                store.close_run(rid, "aborted")
            else:
                store.finish_run(rid, status=status, best_config={"streams": worker + 1},
                                 best_score=float(worker), default_score=0.0)
        store.close()
    except BaseException:  # noqa: BLE001 - reported to the parent
        errors.put(f"worker {worker}: {traceback.format_exc()}")
        raise


def tune_simulated(db: Any, workdir: Any, budget: int = 40) -> int:
    """A real, small tuning run (``autotune tune --simulate``: resnet50 on 4 simulated
    machines of 2 GPUs) stored in ``db``; its run id."""
    import json

    from click.testing import CliRunner

    from autotune.cli import cli

    cluster = workdir / "cluster.json"
    cluster.write_text(json.dumps({"machines": 4, "gpus_per_machine": 2, "nic_gbps": 10}))
    res = CliRunner().invoke(cli, ["tune", "--model", "resnet50", "--simulate", str(cluster),
                                   "--budget", str(budget), "--trial-iterations", "2",
                                   "--db", str(db), "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["run_id"]


def table_field(out: str, name: str) -> str | None:
    """The value of field ``name`` in a printed two-column table (``autotune db show``, the
    session's table); ``None``: no such row."""
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) >= 3 and cells[1] == name:
            return cells[2]
    return None
