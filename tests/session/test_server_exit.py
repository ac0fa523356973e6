"""Servers exit 0 after serving, every time, under load (issue 61): ten 2-worker +
1-server jobs, one after another, beside a process that keeps a core busy.

* six under ``autotune launch -k 1`` (the server is ``python -m autotune.server``),
  natively and through DDP;
* four whose server rank runs the job's own script, as the emulated cluster and
  ``torchrun`` users run it (``AUTOTUNE_ROLE=server``), each rank a fresh interpreter
  (a forked one ends by ``os._exit`` and never meets the interpreter's finalisation): it
  serves inside the session's start or inside ``autotune.workers_group()`` and leaves
  the process there. Natively and through DDP, on a world the script made and on one
  the session made.

Every rank must exit 0. A server rank that ran the script must also leave nothing to the
interpreter's finalisation: no ``torch.distributed`` world and no thread but the main
one when its last ``atexit`` handler runs (tests/server_exit_job.py). A process group
left alive there is what aborted a server at exit (``terminate called without an active
exception``, exit -6) in an earlier ``make test``.
"""

from __future__ import annotations

# own world: whole jobs that start and end (a server's exit is what is tested)

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.ranks import Rank, run
import zygote

# Not serial: the hog runs at the lowest priority (nice 19), so it takes only what the
# other tests beside it leave idle and slows none of them past its time limit (at full
# priority it slowed the twenty interrupted jobs of test_first_contact past 300 s); the
# jobs here meet a busy machine either way
pytestmark = pytest.mark.slow

JOB = str(Path(__file__).resolve().parents[1] / "server_exit_job.py")
HOG = "while True: pass"
SCRIPT_SERVER_JOBS = [("native", "own"), ("ddp", "own"), ("native", "session"),
                      ("ddp", "session")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _script_server_job(out: Path, way: str, world: str) -> list[int | None]:
    """The job's three ranks, every one running the script; their exit codes. The port
    is found free here and bound by rank 0's store later: where another process took it
    in between (tests run side by side), the job starts again on another port (at most
    twice); any other failure is the test's, with every rank's last lines."""
    for _ in range(3):
        port = _free_port()
        base = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
        base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="3",
                    OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        ranks = [Rank(r, role, [sys.executable, JOB, str(out), way, world],
                      dict(base, RANK=str(r), LOCAL_RANK="0", AUTOTUNE_ROLE=role),
                      f"{role[0]}{r}")
                 for r, role in enumerate(("worker", "worker", "server"))]
        job = run(ranks, grace=30, timeout_s=240)
        tails = [e.lines[-12:] for e in job.exits]
        if not any("address already in use" in line.lower() for t in tails for line in t):
            break
    assert not job.timed_out, tails
    codes = [e.returncode for e in job.exits]
    assert codes == [0, 0, 0], (way, world, codes, tails)
    return codes


@pytest.fixture
def hog():
    proc = subprocess.Popen([sys.executable, "-c", HOG], preexec_fn=lambda: os.nice(19))
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.timeout(900)
def test_ten_jobs_with_a_server_all_exit_0_beside_a_cpu_hog(tmp_path, hog) -> None:
    launched = []
    for i in range(10 - len(SCRIPT_SERVER_JOBS)):
        out = tmp_path / f"launch{i}"
        out.mkdir()
        proc = zygote.run(
            [sys.executable, "-m", "autotune.cli", "launch", "--workers", "2", "--servers", "1",
             JOB, str(out), "native" if i % 2 == 0 else "ddp", "session"],
            capture_output=True, text=True, timeout=240)
        launched.append((proc.returncode, proc.stdout[-2000:] + proc.stderr[-2000:]))
    for code, tail in launched:
        assert code == 0, tail
        assert "terminate called" not in tail and "exit -6" not in tail, tail

    for i, (way, world) in enumerate(SCRIPT_SERVER_JOBS):
        out = tmp_path / f"script{i}-{way}-{world}"
        out.mkdir()
        codes = _script_server_job(out, way, world)
        assert codes == [0, 0, 0], (way, world, codes)
        server = json.loads((out / "rank2.json").read_text())
        assert server["role"] == "server"
        # nothing of torch.distributed left for the interpreter to finalise
        assert server == {"threads": 1, "world": False, "role": "server"}, (way, world, server)
