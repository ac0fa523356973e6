"""BytePS inside DDP, with real processes (``autotune launch``, gloo): DDP built on
``autotune.workers_group()``, Summation Service servers as ``python -m autotune.server``,
and ``autotune.session(ddp_model)`` running push/pull and the intra-machine step through
the native runtime on DDP's buckets (tests/ddp_servers_worker.py).

* 2 workers + 1 server, every trial push/pull (through the server and the colocated
  Summation Services, streams and chunks switching): bit for bit plain DDP;
* 2 machines x 2 workers + 1 server, every trial intra ``root``/``scatter`` (all-reduce
  and push/pull): within float rounding of plain DDP on every rank;
* the server killed (SIGKILL) while push/pull runs through it: the round fails, every
  bucket is averaged again among the workers, the server is dropped, training goes on
  and still ends bit for bit where plain DDP does.

The buckets must have gone through the runtime (counted by the hook), not only through
its all-reduce fallback, which would give DDP's result anyway.
"""

from __future__ import annotations

# own world: Summation Service servers, two machines, a server killed

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tests.ddp_servers_worker as w
import zygote

pytestmark = pytest.mark.slow


def launch(tmp: Path, workers: int, servers: int, machines: int | None, scenario: str,
           family: str) -> list[dict]:
    cmd = [sys.executable, "-m", "autotune.cli", "launch", "-n", str(workers), "-k", str(servers),
           *(["-m", str(machines)] if machines else []), w.__file__, scenario, str(tmp), family]
    proc = zygote.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=300)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "Traceback" not in log, log[-4000:]
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(workers)]


def went_through_the_runtime(run: dict) -> None:
    buckets = run["buckets"]
    assert buckets >= 2, run  # DDP cut the model into several buckets
    # the runtime averaged every bucket of (nearly) every iteration
    assert run["handed"] >= buckets * (w.STEPS - 4), run


def test_pushpull_through_servers_is_bit_for_bit_ddp(tmp_path):
    ranks = launch(tmp_path, 2, 1, None, "parity", "pushpull")
    for r in ranks:
        s = r["session"]
        assert s["state"] == r["ddp"]["state"]
        went_through_the_runtime(s)
        assert {c["transport"] for c in s["configs"]} == {"pushpull"}
        assert {c["servers"] for c in s["configs"]} == {0, 1}  # colocated, and the server
        assert len({(c["streams"], c["chunk_bytes"]) for c in s["configs"]}) >= 3
        assert not [h for h in s["history"] if h["error"]]


def test_a_settled_session_keeps_push_pull_in_the_background_bit_for_bit_ddp(tmp_path):
    """Push/pull through the server fixed, no search: once settled, each step's sync keeps
    the configuration without waiting for the server's message (``Runtime.sync(background=
    True)``), and training still ends bit for bit where plain DDP does."""
    ranks = launch(tmp_path, 2, 1, None, "parity", "kept")
    for r in ranks:
        s = r["session"]
        assert s["state"] == r["ddp"]["state"]
        went_through_the_runtime(s)
        assert {(c["transport"], c["servers"]) for c in s["configs"]} == {("pushpull", 1)}
        assert s["background"] >= 10, s["background"]  # 40 steps, settled after about 22


def test_intra_machine_step_on_two_machines_matches_ddp(tmp_path):
    ranks = launch(tmp_path, 4, 1, 2, "parity", "intra")
    for r in ranks:
        s = r["session"]
        went_through_the_runtime(s)
        ran = {(c["transport"], c["intra"]) for c in s["configs"]}
        assert {"root", "scatter"} <= {i for _, i in ran} and len(ran) >= 3, ran
        scale = max(abs(v) for v in r["ddp"]["state"])
        assert max(abs(a - b) for a, b in zip(s["state"], r["ddp"]["state"])) <= 1e-5 * scale


def test_a_server_lost_mid_pushpull_is_survived_bit_for_bit(tmp_path):
    ranks = launch(tmp_path, 2, 1, None, "kill_server", "server")
    for r in ranks:
        s = r["session"]
        assert s["lost_servers"] == [2]
        assert s["state"] == r["ddp"]["state"]
        pushpull = [c for c in s["configs"] if c["transport"] == "pushpull"]
        assert pushpull and all(c["servers"] == 1 for c in pushpull)
        assert s["configs"][-1]["transport"] == "allreduce"  # what is left without servers
        assert s["handed"] > 0 and s["averaged_again"] >= s["buckets"]  # a round averaged again
    failed = [h for h in ranks[0]["session"]["history"] if h["error"]]
    assert failed and "rank 2 (server" in failed[0]["error"], failed
