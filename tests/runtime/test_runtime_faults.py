"""Faults: a Summation Service process killed mid-run (dropped, the workers go on), and a
silent peer (timeout).

Each scenario needs its own job (a dead process breaks the world), so each launches one:
2 workers + 1 server for the kill, 2 workers for the stall (marked slow).
"""

from __future__ import annotations

# own world: servers killed and peers stalled: each case breaks its world

import json

import pytest

import runtime_helpers as rh


@pytest.mark.parametrize("views", [False, True], ids=["copies", "grad-views"])
def test_killed_server_is_dropped_and_the_iteration_averaged_again(tmp_path, views) -> None:
    # grad views: .grad shows the last round's averages, and the round the server dies in
    # has pulled part of its results; they must land elsewhere, so .grad stays intact
    code, log = rh.launch_group("faults", tmp_path, workers=2, servers=1, machines=None,
                                extra_env={"AUTOTUNE_GRAD_VIEWS": "1" if views else "0"})
    # the launcher reports the killed server; the workers finish: the job succeeds
    assert code == 0 and "rank 2 (server) failed, killed by SIGKILL" in log, log[-3000:]
    for r in range(2):
        path = tmp_path / f"rank{r}.json"
        assert path.exists(), log[-4000:]
        res = json.loads(path.read_text())
        assert res.get("iteration") == 3 and res["ok_iterations"] == 3, (res, log[-4000:])
        assert res["rank"] == res["server"] == 2, res["fault"]
        assert "rank 2 (server" in res["fault"] and "go on without servers" in res["fault"]
        assert res["recoverable"] is True
        assert res["seconds"] < res["timeout"], res
        assert res["intact"], ".grad was written although the averaging failed"
        # the big gradient's own chunks were pushed from .grad itself in all 4 rounds, the
        # failed one included (the 7-element one shares a chunk: copied)
        assert res["lent"] == 4, res
        # both gradients views (none of the buffers the round reduced into), or none
        assert res["viewed"] == ([2, 0] if views else [0, 0]), res
        # push/pull through the lost server is refused from now on, all-reduce works
        assert res["after"].startswith("ConfigError") and "were lost" in res["after"]
        assert res["retried"], "the same gradients, averaged again, are the mean"
        assert res["lost_servers"] == [2]


@pytest.mark.slow
def test_silent_peer_times_out_naming_it(tmp_path) -> None:
    code, log = rh.launch_group("stall", tmp_path, workers=2, servers=0, machines=None,
                                extra_env={"AUTOTUNE_FAULT": "streams=2@stall:1"})
    assert code == 0, log[-3000:]
    res = json.loads((tmp_path / "rank0.json").read_text())
    assert res["first"] == "ok"
    assert res["rank"] == 1 and "rank 1 (worker" in res["fault"], res
    assert res["timeout"] <= res["seconds"] < res["timeout"] + 15, res
    stalled = json.loads((tmp_path / "rank1.json").read_text())
    assert "injected stall" in stalled["fault"]


def test_fault_rules_parse_and_match() -> None:
    from autotune.runtime.control.faults import FaultInjector, parse_faults

    rules = parse_faults("transport=pushpull,servers=1@delay:0.25; streams=2@stall:1; *")
    inj = FaultInjector(rules, rank=1)
    assert inj.delay({"transport": "pushpull", "servers": 1}) == 0.25
    assert inj.delay({"transport": "pushpull", "servers": 2}) == 0.0
    assert inj.stalls({"streams": 2}) and not FaultInjector(rules, rank=0).stalls({"streams": 2})
    assert inj.refuses({"streams": 5})  # '*' with the default mode, fail
    for bad, match in [("x=1@delay", "seconds >= 0"), ("x=1@delay:-1", "seconds >= 0"),
                       ("x=1@stall", "needs a rank"), ("x=1@melt", "unknown mode"),
                       ("x@fail", "name=value")]:
        with pytest.raises(ValueError, match=match):
            parse_faults(bad)
