"""The cost a session reports is the cost on the user's clock (issue 64 item 3): the same
job run untuned (``budget=0``) and tuned, interleaved, in real processes (the shared
2-rank world, tests/cost_worker.py), both ways in. What the tuned session says tuning lost
against the default (``tuning_cost["lost_s"]``, the figure of the done line, the table,
the store and the report) must match the measured wall-time difference between the two:
the median over 5 pairs of each pair's error (its tuned run's wall time, less its untuned
run's, less what the tuned run reported; paired, so that the machine's drift between pairs
cancels) within 0.5 s or a quarter of the measured difference, whichever is larger (the
issue's tolerance). Before issue 64 the switches between configurations were not charged
and the session's end freed the search's process groups one after another (0.6 s for 37
groups): 1.51 s reported against 2.34 s measured. The measuring of each trial iteration
(a collective every rank waits in) was not charged either, and the default's step was one
warm-up iteration: a CI run reported 0.94 s against 1.46 s (the median pair 0.24 s off).
Now (the measuring charged, the step the median of every iteration of the default) the
median pair is 0.01-0.12 s off at 100 steps (1.0-1.3 s lost), native and through DDP, four
runs alone on a 2-core machine.
"""

from __future__ import annotations

import statistics

import pytest

# two wall times compared: alone on the machine (the serial tier), not beside other tests
pytestmark = [pytest.mark.slow, pytest.mark.serial]


@pytest.mark.parametrize("way", ["native", "ddp"])
def test_the_reported_cost_matches_the_wall_clock(world, way) -> None:
    leader = world(2).run("cost_worker:cost_match", way=way, timeout=400)[0]
    walls, costs = leader["walls"], leader["costs"]
    measured = statistics.median(walls["tuned"]) - statistics.median(walls["untuned"])
    errors = [tuned - untuned - cost["lost_s"]
              for tuned, untuned, cost in zip(walls["tuned"], walls["untuned"], costs)]
    assert len(errors) == 5, leader
    assert all(c["iterations"] > 0 for c in costs), costs
    # the session's start, said beside the cost (issue 64), is what entering it took
    for cost, part in zip(costs, leader["parts"]["tuned"]):
        assert 0 < cost["start_s"] <= part["enter"] + 1e-3, (cost, part)
        assert cost["start_s"] >= 0.8 * part["enter"] - 0.05, (cost, part)
    tolerance = max(0.5, 0.25 * abs(measured))
    assert abs(statistics.median(errors)) <= tolerance, (
        f"each pair's error {[round(e, 2) for e in errors]} s, measured {measured:.2f} s "
        f"(walls {walls}, costs {costs}, parts {leader['parts']})")
