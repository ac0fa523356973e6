"""The cost a session reports is the cost on the user's clock (issue 64 item 3): the same
job run untuned (``budget=0``) and tuned, interleaved, in real processes (the shared
2-rank world, tests/cost_worker.py), both ways in. What the tuned session says tuning lost
against the default (``tuning_cost["lost_s"]``, the figure of the done line, the table,
the store and the report) must match the measured wall-time difference between the two:
within 0.5 s or a quarter of it, whichever is larger (the issue's tolerance), medians of
5 pairs (of 3 pairs, 1 run in 6 fell outside it, alone on a 2-core machine). Before
issue 64 the switches between configurations were not charged and the session's end
freed the search's process groups one after another (0.6 s for 37 groups):
1.51 s reported against 2.34 s measured. Now about 1.45 s against 1.58 s (150 steps);
at 100 steps (the trials' cost the same, 13 s less of the serial tier) 0.82-1.06 s against
0.91-1.18 s, native and through DDP, two runs.
"""

from __future__ import annotations

import statistics

import pytest

# two wall times compared: alone on the machine (the serial tier), not beside other tests
pytestmark = [pytest.mark.slow, pytest.mark.serial]


@pytest.mark.parametrize("way", ["native", "ddp"])
def test_the_reported_cost_matches_the_wall_clock(world, way) -> None:
    leader = world(2).run("cost_worker:cost_match", way=way, timeout=400)[0]
    walls = leader["walls"]
    measured = statistics.median(walls["tuned"]) - statistics.median(walls["untuned"])
    reported = statistics.median(c["lost_s"] for c in leader["costs"])
    assert all(c["iterations"] > 0 for c in leader["costs"]), leader["costs"]
    # the session's start, said beside the cost (issue 64), is what entering it took
    for cost, part in zip(leader["costs"], leader["parts"]["tuned"]):
        assert 0 < cost["start_s"] <= part["enter"] + 1e-3, (cost, part)
        assert cost["start_s"] >= 0.8 * part["enter"] - 0.05, (cost, part)
    tolerance = max(0.5, 0.25 * abs(measured))
    assert abs(reported - measured) <= tolerance, (
        f"reported {reported:.2f} s, measured {measured:.2f} s (walls {walls}, "
        f"costs {leader['costs']}, parts {leader['parts']})")
