"""The operation timeline (``autotune/runtime/data/trace.py``) and its per-stage reading
(``benchmarks/timeline.py``): off by default; on, a real push/pull job (2 workers + 1
server, gloo, ``autotune launch``; the server traced through ``AUTOTUNE_TRACE``) records
every push, pull, receive and sum sent, and the timeline joins them chunk by chunk with
the exact bytes."""

from __future__ import annotations

# own world: a Summation Service server, and AUTOTUNE_TRACE read at start

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import runtime_helpers as rh
from autotune.runtime.data import trace
from autotune.runtime.data.engine import Op, OpError, issue
from autotune.runtime.data.plan import cut

sys.path.insert(0, str(rh.ROOT / "benchmarks"))
import timeline  # noqa: E402
import zygote

SIZES = (70_000, 30_000, 100_000)  # float32 gradients
CHUNK = 64 * 1024
RANK_PROGRAM = textwrap.dedent(f"""
    import sys
    from pathlib import Path

    import torch
    import torch.distributed as dist

    from autotune.runtime import Runtime
    from autotune.runtime.data import trace

    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rt = Runtime.bootstrap(timeout=60)
    trace.start()
    me = rt.info.rank
    params = [torch.nn.Parameter(torch.zeros(n)) for n in {SIZES!r}]
    for p in params:
        p.grad = torch.zeros_like(p)
    rt.register(params)
    cfg = {{"transport": "pushpull", "servers": 1, "streams": 2, "chunk_bytes": {CHUNK}}}
    leader = me == rt.info.leader
    for i in range(3):
        for p in params:
            p.grad.fill_(me + 1.0)
        t0 = trace.now()
        rt.sync(cfg if leader else None)
        rt.wait()
        trace.mark(f"iteration pp {{i}}", t0, trace.now())
        assert all(bool((p.grad == 1.5).all()) for p in params), "wrong average"
    rt.sync(stop=True) if leader else rt.sync()
    trace.dump(out, me, "worker")
    rt.shutdown()
""")


class _Done:
    """A finished work handle, as gloo returns once an operation has completed."""

    def wait(self, timeout=None) -> bool:
        return True


def test_off_by_default_and_records_only_while_on() -> None:
    assert not trace.on()
    op = issue("stream 0 chunk 3: push to rank 1", (1,), lambda buf: _Done(), torch.zeros(2))
    assert isinstance(op.work, _Done)  # untraced: the handle itself, no watcher
    op.wait(1.0)
    trace.start()
    try:
        op = issue("stream 0 chunk 4: push to rank 1", (1,), lambda buf: _Done(), torch.zeros(4))
        assert isinstance(op.work, trace.Watched)
        op.wait(5.0)
        trace.mark("iteration x 0", 1.0, 2.0)
    finally:
        events = trace.stop()
    assert not trace.on()
    assert [e["what"] for e in events] == ["stream 0 chunk 4: push to rank 1", "iteration x 0"]
    e = events[0]
    assert e["peers"] == [1] and e["nbytes"] == 16
    assert e["issued"] <= e["done"] and e["issued"] <= e["waited"]


def test_a_traced_failure_is_still_an_op_error_naming_the_operation() -> None:
    class Broken:
        def wait(self, timeout=None):
            raise RuntimeError("connection closed by rank 1")

    trace.start()
    try:
        op = issue("stream 1 chunk 2: pull from rank 1", (1,), lambda: Broken())
        with pytest.raises(OpError, match="stream 1 chunk 2: pull from rank 1.*closed by rank 1"):
            op.wait(5.0)
    finally:
        trace.stop()
    assert isinstance(Op(_Done(), "x", ()).work, _Done)


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("trace")
    prog = out / "rank.py"
    prog.write_text(RANK_PROGRAM)
    env = {**os.environ, "AUTOTUNE_TRACE": str(out)}  # the server's trace
    proc = zygote.run([sys.executable, "-m", "autotune.launch", "-n", "2", "-k", "1",
                           str(prog), str(out)], cwd=rh.ROOT, capture_output=True, text=True,
                          timeout=240, env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return out


# serial: the timeline joins clocks of three processes; beside other work their offsets
# drift by milliseconds and a stage can come out negative
@pytest.mark.serial
def test_the_timeline_joins_every_chunk_of_a_real_push_pull_iteration(traced: Path) -> None:
    ranks = timeline.load(traced)
    assert sorted((r, d["role"]) for r, d in ranks.items()) == [
        (0, "worker"), (1, "worker"), (2, "server")]
    res = timeline.analyse(ranks)  # the last iteration of the first push/pull label
    assert res["iteration"] == "pp" and res["index"] == 2
    chunks = len(cut(list(SIZES), CHUNK))
    assert res["chunks"] == chunks
    for stage in ("push queued", "push on the wire", "wait for parts", "summation",
                  "pull queued", "pull on the wire", "chunk, push issued to pull done"):
        s = res["stages"][stage]
        assert s["n"] == 2 * chunks, stage  # every chunk of both workers
        assert s["p10_ms"] >= 0, stage
    assert res["stages"]["chunk, push issued to pull done"]["p90_ms"] <= 1e3 * res["span_s"]
    for w in (0, 1):
        x = res["workers"][w]
        assert x["bytes_out"] == x["bytes_in"] == 4 * sum(SIZES)
        assert 0 <= x["first_push_issued_s"] < x["first_pull_done_s"] <= x["last_pull_done_s"]
    # one push and one pull flow per worker and stream, all to the one server
    assert sorted((f["direction"], f["src"], f["dst"], f["stream"]) for f in res["flows"]) == \
        sorted([("push", w, 2, s) for w in (0, 1) for s in (0, 1)]
               + [("pull", 2, w, s) for w in (0, 1) for s in (0, 1)])
    with pytest.raises(SystemExit, match="no iteration 'nope'"):
        timeline.analyse(ranks, "nope")


@pytest.mark.serial  # the same job as above (its fixture)
def test_a_sum_sent_before_its_last_part_came_in_is_the_previous_iterations(traced: Path) -> None:
    """The window opens at the first worker's start of the iteration; the server may still
    be sending the previous sum to a worker that starts later. Such a send, though inside
    the window, is not this iteration's (the stage came out negative in a full run)."""
    import copy

    ranks = timeline.load(traced)
    before = timeline.analyse(ranks)["stages"]["summation"]
    _, _, marks = timeline.window(ranks, None, -1)
    t0 = min(m["issued"] for m in marks)
    sends = [e for e in ranks[2]["events"] if "send sum to" in e["what"]]
    late = copy.deepcopy(sends[-1])  # a send of the same chunk, issued as the window opens
    late.update(issued=t0 + 1e-6, waited=t0 + 2e-6, done=t0 + 3e-6)
    ranks[2]["events"].append(late)
    assert timeline.analyse(ranks)["stages"]["summation"] == before


@pytest.mark.serial  # the same job as above (its fixture)
def test_a_receive_the_server_posted_before_the_window_is_still_this_iterations(
        traced: Path) -> None:
    """The server posts its receives ahead (``sum_depth``): one for this iteration may be
    issued before the window opens and done inside it. It counts (a fresh clone's `make
    test` once found a chunk's "wait for parts" missing for both workers, 24 of 26)."""
    ranks = timeline.load(traced)
    before = timeline.analyse(ranks)["stages"]["wait for parts"]
    _, _, marks = timeline.window(ranks, None, -1)
    t0 = min(m["issued"] for m in marks)
    recv = [e for e in ranks[2]["events"] if "receive from" in e["what"]
            and e["done"] >= t0]
    recv[0]["issued"] = t0 - 0.5  # posted during the previous iteration
    assert timeline.analyse(ranks)["stages"]["wait for parts"] == before
