"""Many sessions in one process (issue 61): the second to the eighth session each cost
what the first did, natively and through DDP, on a fresh model each time or on the same
one again; each trains as an ``all_reduce`` reference does; the process's world is left
as the user made it.

Runs in the shared 2-rank world (tests/worlds.py), whose ranks made their world before
any session, as a notebook or a sweep does (tests/many_sessions_worker.py).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow
SESSIONS = 8


@pytest.mark.parametrize("way,same", [("native", False), ("ddp", False), ("native", True),
                                      ("ddp", True)])
def test_eight_sessions_in_one_process_pile_nothing_up(world, way, same) -> None:
    ranks = world(2).run("many_sessions_worker:sessions", way=way, n=SESSIONS, same=same,
                         timeout=300)
    for r in ranks:
        threads = r["threads"]
        assert len(threads) == SESSIONS
        # about 6 gloo threads a session piled up before (the control and workers'
        # groups were never destroyed)
        assert max(threads[1:]) <= threads[0] + 2, threads
        # what the sessions left burns at most 1% of a core while idle (measured against
        # the same process before them: on a loaded machine the harness's own share moves)
        assert r["idle_cpu"] <= r["idle_cpu_before"] + 0.01, (r["idle_cpu"],
                                                             r["idle_cpu_before"])
        # every session, the later ones on a model that had one before included, trains
        # as all_reduce-averaged gradients do, to float rounding
        assert max(r["diffs"]) < 1e-5, r["diffs"]
        # the session's forward hooks were removed at its close
        assert len(set(r["hooks"])) == 1, r["hooks"]
        assert r["world_sum"] == r["world"] == 2
