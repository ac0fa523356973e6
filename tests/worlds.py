"""Shared torch.distributed worlds for the tests: start the ranks once, run many cases.

Starting a rank costs seconds (importing torch, forming the process group), and most
multi-process tests need nothing from a fresh one. A :class:`World` is a real gloo job of
``workers`` ranks under ``autotune launch`` whose ranks run this file: each waits for the
world's next case, runs it in the process group it shares with the other ranks, and writes
what the case returned. The test side hands cases over as files in the world's folder::

    case-0003.json            {"fn": "ddp_worker:parity", "kwargs": {...}, "env": {...}}
    case-0003.rank1.json      {"ok": true, "result": ...}   (or "ok": false, "error": ...)

A case is a function ``module:name`` on the tests' path, called with the case's keyword
arguments plus ``out`` (a folder of its own); it returns something JSON can carry. ``env``
is set in ``os.environ`` for the case's duration (what the runtime reads when a session
starts, e.g. ``AUTOTUNE_FAULT``) and restored after it.

A case that fails on any rank may leave the ranks out of step (a collective half done), so
the world is closed and the next case gets a fresh one; so does a world whose job died.
Every wait is bounded: the test side's by the case's ``timeout``, the ranks' by
``IDLE_S`` without a case and by the death of the pytest process that started them.

The pytest side is the ``world`` fixture (tests/conftest.py): ``world(2).run(fn, **kw)``
returns one result per rank, rank 0 first. A test module that starts its own ranks says
why in a ``# own world: ...`` line (tests/test_worlds.py checks that).
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any
from unittest import mock
import zygote

TESTS = Path(__file__).resolve().parent
TASKS = Path("/proc/self/task")
ROOT = TESTS.parent
IDLE_S = 900.0   # a rank with no case for this long ends (the test run is gone)
POLL_S = 0.02    # how often an idle rank looks for its next case
# A session that ends cleanly destroys its process groups (tests/session/test_many_sessions.py);
# one that a case's fault ended leaves them, and with them gloo's network threads, which
# wake up even when idle: a world whose ranks have gathered more threads than this is
# stopped after its case and the next case starts a fresh one.
MAX_THREADS = 64


class WorldError(AssertionError):
    """A case failed on a rank, or the world's job died or did not answer in time."""


def _write_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


# ---------------------------------------------------------------------- pytest side
class World:
    """``workers`` ranks (gloo, CPU) started under ``autotune launch`` on first use, on
    ``machines`` emulated machines (``autotune launch -m``; ``None``: one)."""

    def __init__(self, workers: int, folder: Path, machines: int | None = None) -> None:
        self.workers = workers
        self.machines = machines
        self.folder = folder
        self.proc: subprocess.Popen | None = None
        self.log: Path | None = None
        self.next = 0
        self.starts = 0

    def _start(self) -> None:
        self.starts += 1
        self.dir = self.folder / f"start{self.starts}"
        self.dir.mkdir(parents=True)
        self.next = 0
        env = dict(os.environ, OMP_NUM_THREADS="1", WORLD_OWNER_PID=str(os.getpid()))
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS), env.get("PYTHONPATH", "")])
        self.log = self.dir / "launch.log"
        with open(self.log, "w") as log:
            self.proc = zygote.Popen(
                [sys.executable, "-m", "autotune.launch", "-n", str(self.workers), "-k", "0",
                 *(["-m", str(self.machines)] if self.machines else []),
                 "--grace", "10", __file__, str(self.dir)],
                env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)

    def _output(self) -> str:
        return self.log.read_text()[-6000:] if self.log and self.log.exists() else ""

    def run(self, fn: str, timeout: float = 240, env: dict[str, str] | None = None,
            **kwargs: Any) -> list[Any]:
        """Run ``fn`` (``"module:function"``) on every rank; what each rank returned."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        index = self.next
        self.next += 1
        out = self.dir / f"case-{index:04d}.out"
        out.mkdir()
        _write_atomic(self.dir / f"case-{index:04d}.json",
                      {"fn": fn, "kwargs": {**kwargs, "out": str(out)}, "env": env or {}})
        paths = [self.dir / f"case-{index:04d}.rank{r}.json" for r in range(self.workers)]
        deadline = time.monotonic() + timeout
        while not all(p.exists() for p in paths):
            code = self.proc.poll()
            if code is not None:
                self.proc = None
                raise WorldError(f"the {self.workers}-rank world died during {fn} "
                                 f"(exit code {code}); its output:\n{self._output()}")
            if time.monotonic() > deadline:
                missing = [r for r, p in enumerate(paths) if not p.exists()]
                self.close(ask=False)
                raise WorldError(f"{fn} did not finish on rank(s) {missing} within "
                                 f"{timeout:.0f} s; the world's output:\n{self._output()}")
            time.sleep(0.05)
        answers = [json.loads(p.read_text()) for p in paths]
        failed = [(r, a["error"]) for r, a in enumerate(answers) if not a["ok"]]
        if failed:
            self.close(ask=False)  # perhaps out of step: the next case gets a fresh world
            raise WorldError("\n".join(f"{fn} failed on rank {r}:\n{e}" for r, e in failed))
        if max(a["threads"] for a in answers) > MAX_THREADS:
            self.close()
        return [a["result"] for a in answers]

    def close(self, ask: bool = True) -> None:
        """Stop the ranks: ask them to (``ask``), then SIGTERM, then SIGKILL."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        if ask:
            _write_atomic(self.dir / f"case-{self.next:04d}.json", {"stop": True})
            try:
                proc.wait(timeout=20)
                return
            except subprocess.TimeoutExpired:
                pass
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=wait)
                return
            except (ProcessLookupError, subprocess.TimeoutExpired):
                continue


class Worlds:
    """The worlds of one pytest process, one per shape (ranks, machines), each started on
    first use."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.worlds: dict[tuple[int, int | None], World] = {}

    def __call__(self, workers: int = 2, machines: int | None = None) -> World:
        key = (workers, machines)
        if key not in self.worlds:
            name = f"w{workers}" + (f"m{machines}" if machines else "")
            self.worlds[key] = World(workers, self.folder / name, machines)
        return self.worlds[key]

    def close(self) -> None:
        for w in self.worlds.values():
            w.close()


# ---------------------------------------------------------------------- rank side
def _owner_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _run_case(case: dict) -> Any:
    module, name = case["fn"].split(":")
    fn = getattr(importlib.import_module(module), name)
    with mock.patch.dict(os.environ, case["env"]):  # the case's env, restored after it
        return fn(**case["kwargs"])


def serve(folder: str) -> None:
    """A rank's loop: join the world, then run cases in order until told to stop."""
    import torch
    import torch.distributed as dist

    import tuner_libs  # noqa: F401 - no case waits for the Tuner's imports

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    owner = int(os.environ.get("WORLD_OWNER_PID", "0"))
    here = Path(folder)
    index = 0
    while True:
        path = here / f"case-{index:04d}.json"
        idle_since = time.monotonic()
        while not path.exists():
            if time.monotonic() - idle_since > IDLE_S or (owner and not _owner_alive(owner)):
                return
            time.sleep(POLL_S)
        case = json.loads(path.read_text())
        if case.get("stop"):
            break
        try:
            answer = {"ok": True, "result": _run_case(case)}
        except BaseException:  # noqa: BLE001 - the test side reports it, naming the rank
            answer = {"ok": False, "error": traceback.format_exc()}
        answer["threads"] = threading.active_count() if not TASKS.exists() else \
            len(os.listdir(TASKS))  # native ones (gloo's) too, where Linux shows them
        _write_atomic(here / f"case-{index:04d}.rank{rank}.json", answer)
        if not answer["ok"]:
            sys.exit(1)  # perhaps out of step with the others: the test side starts anew
        index += 1
    dist.destroy_process_group()


if __name__ == "__main__":
    serve(sys.argv[1])
