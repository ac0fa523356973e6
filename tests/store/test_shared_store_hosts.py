"""Two jobs on two emulated hosts share one PostgreSQL store on a third, and the second
starts warm from the first (issue 42): ``autotune tune`` on host 0 records its run over
the emulated network; a plain training job under ``autotune.session`` on host 1 finds it
(graph edit distance, across the store) and tries its best configuration first."""

from __future__ import annotations

# own world: jobs on emulated hosts sharing a store on another

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.store import Store
import zygote

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
ENV = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{TESTS}", "OMP_NUM_THREADS": "1",
       "AUTOTUNE_PROGRESS": "0"}


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_job_on_another_host_starts_warm_from_the_shared_store(tmp_path):
    from autotune.emulate import Cluster, leftovers
    from postgres_server import PASSWORD, PostgresServer

    reason = PostgresServer.unavailable()
    if reason is not None:
        pytest.skip(reason)
    with Cluster(hosts=3, rate="1gbit") as cluster:
        db_host = cluster.hosts[2]
        with PostgresServer(host=db_host.addr, wrap=lambda argv: cluster.wrap(2, argv)) as pg:
            url = pg.database()
            assert db_host.addr in url

            def on_host(i: int, argv: list[str]) -> subprocess.CompletedProcess:
                proc = zygote.run(cluster.wrap(i, argv), env=ENV, cwd=tmp_path,
                                      capture_output=True, text=True, timeout=600)
                assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
                return proc

            # the store is not reachable from this (the root) namespace: only over the
            # emulated network, from the hosts
            first = on_host(0, [sys.executable, "-m", "autotune.cli", "tune", "--model",
                                "tune_helpers:tiny", "--workers", "2", "--budget", "8",
                                "--trial-iterations", "2", "--db", url, "--json"])
            report = json.loads(first.stdout)
            out = tmp_path / "history.json"
            second = on_host(1, [sys.executable, "-m", "autotune.cli", "launch", "--workers",
                                 "2", str(TESTS / "tune_helpers.py"), url, str(out), "8"])
            (history,) = json.loads(out.read_text())
            assert PASSWORD not in first.stdout + first.stderr + second.stdout + second.stderr

            socket_url = url.replace(f"@{db_host.addr}:{pg.port}/",
                                     "@/").split("?")[0] + f"?host={pg.dir}&port={pg.port}"
            with Store(socket_url, create=False) as store:
                tuned = store.run(report["run_id"])
                later = store.runs(job="user-job")[0]
                first_trial = store.trials(later["id"])[0]
        # each job ran on its own host and recorded there, one store for both
        assert tuned["job"] == "tune:tune_helpers:tiny" and tuned["status"] == "finished"
        assert later["status"] == "finished"
        assert (later["model_fp"], later["topology_fp"]) == (tuned["model_fp"],
                                                             tuned["topology_fp"])
        # the second job's first trial is the first job's best, from the shared store
        assert first_trial["config"] == tuned["best_config"] == history[0]["config"]
        assert first_trial["technique"] in ("warm", "default", "seed")
    assert leftovers(cluster.name) == {"namespaces": [], "links": [], "files": []}
