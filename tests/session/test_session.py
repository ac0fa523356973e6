"""autotune.session() with real processes under `autotune launch` (gloo).

Three process groups, each started once and running a whole training job:

* 2 workers + 1 Summation Service server: the session trains, parameters are identical on
  both workers after every step, exactly ``budget`` iterations are tuning iterations and
  then the configuration stays fixed, and the final parameters equal a single-process
  computation of synchronous SGD on the averaged gradients, although the tuner switched
  configurations (both transports) many times. The push/pull seed is made slow
  (``AUTOTUNE_FAULT`` delay), so its trial is cut short.
* 2 workers, no servers (a case of the shared 2-rank world, tests/worlds.py), with faults
  injected into two configurations: a plain DDP run of the same seed and data ends with
  the same parameters as the session, and the failed trials are reported while training
  goes on.
* 2 workers on 2 emulated machines (the shared world of that shape), one stream made
  slow: the warm-up's last iteration
  runs several streams, reads the slowness as a per-flow cap, and the first trial is the
  seed with several streams.
"""

from __future__ import annotations

# own world: a Summation Service server, and a bad pin failing the launch (the rest: `world`)

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import session_worker as sw
import zygote

STEPS, BUDGET = 60, 40
pytestmark = pytest.mark.slow


def launch(tmp: Path, workers: int, servers: int, env: dict[str, str],
           machines: int | None = None, check: bool = True) -> list[dict] | str:
    cmd = [sys.executable, "-m", "autotune.cli", "launch", "--workers", str(workers),
           "--servers", str(servers)] + (["--machines", str(machines)] if machines else []) + [
           str(Path(sw.__file__)), str(tmp)]
    full = {**os.environ, "SESSION_STEPS": str(STEPS), "SESSION_BUDGET": str(BUDGET),
            "OMP_NUM_THREADS": "1", **env}
    proc = zygote.run(cmd, env=full, capture_output=True, text=True, timeout=600)
    if not check:  # the launch must fail: its output
        assert proc.returncode != 0, proc.stdout[-4000:] + proc.stderr[-4000:]
        return proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (tmp / "launch.log").write_text(proc.stdout + proc.stderr)
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(workers)]


def reference(workers: int) -> torch.Tensor:
    """Synchronous SGD on the average of every worker's gradient, in one process."""
    model = sw.make_model(1)
    opt = torch.optim.SGD(model.parameters(), lr=sw.LR)
    data = [sw.batches(1, r, STEPS) for r in range(workers)]
    for step in range(STEPS):
        grads = []
        for r in range(workers):
            model.zero_grad()
            x, y = data[r][step]
            torch.nn.functional.mse_loss(model(x), y).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        for i, p in enumerate(model.parameters()):
            p.grad = sum(g[i] for g in grads) / workers
        opt.step()
    return sw.flat(model)


SLOW = {"transport": "pushpull", "servers": 1, "chunk_bytes": 262144, "streams": 1}


@pytest.fixture(scope="module")
def with_server(tmp_path_factory) -> tuple[list[dict], Path]:
    tmp = tmp_path_factory.mktemp("session_server")
    slow = ",".join(f"{k}={v}" for k, v in SLOW.items()) + "@delay:0.3"
    return launch(tmp, 2, 1, {"AUTOTUNE_FAULT": slow}), tmp


@pytest.fixture(scope="module")
def with_faults(world) -> list[dict]:
    faults = "streams=2@fail;chunk_bytes=2097152@configure:1"
    return world(2).run("session_worker:case", steps=STEPS, budget=BUDGET, ddp=True,
                        env={"AUTOTUNE_FAULT": faults}, timeout=600)


@pytest.fixture(scope="module")
def capped(world) -> list[dict]:
    """One worker per emulated machine (the warm-up probes for a per-flow cap) and one
    stream made slow, as under a cap."""
    return world(2, machines=2).run("session_worker:case", steps=12, budget=6,
                                    env={"AUTOTUNE_FAULT": "streams=1@delay:0.5"})


def test_trains_and_workers_stay_identical(with_server):
    ranks, _ = with_server
    s0, s1 = ranks[0]["session"], ranks[1]["session"]
    assert len(s0["sums"]) == STEPS
    assert s0["sums"] == s1["sums"]  # bit-identical parameters after every step
    first, last = sum(s0["losses"][:10]) / 10, sum(s0["losses"][-10:]) / 10
    assert last < 0.8 * first


def test_exactly_budget_tuning_iterations_then_fixed(with_server):
    ranks, _ = with_server
    s0 = ranks[0]["session"]
    # the whole budget, or less where the confirm phase separated the kept one early
    assert s0["tuning_iterations"] == sum(h["iterations"] for h in s0["history"]) <= BUDGET
    # configs[i] is the configuration applied after step i, i.e. for iteration i + 1
    w = 3  # the session's default warm-up iterations come first
    tuning = {json.dumps(c, sort_keys=True) for c in s0["configs"][w - 1: w + BUDGET - 1]}
    kept = {json.dumps(c, sort_keys=True) for c in s0["configs"][w + BUDGET - 1:]}
    assert len(tuning) >= 4, "the tuner should have tried several configurations"
    assert s0["configs"][: w - 1] == [s0["configs"][0]] * (w - 1)
    assert len(kept) == 1
    assert json.loads(kept.pop()) == s0["best"]
    assert ranks[1]["session"]["configs"] == s0["configs"]  # every rank applied the same


def test_across_machines_the_last_warm_up_iteration_runs_several_streams(with_server, capped):
    from autotune.schedule.schedule import PROBE_STREAMS

    # one machine: the warm-up is the default throughout (checked above); two machines:
    # the default, then the default with several streams (configs[i] is for iteration i + 1),
    # its chunks cut so that every stream carries one (flow_probe; test_schedule.py)
    c = capped[0]["session"]["configs"]
    assert c[0]["streams"] == 1 and c[1]["streams"] == PROBE_STREAMS
    assert c[1]["chunk_bytes"] <= c[0]["chunk_bytes"]
    assert {**c[1], "streams": 1, "chunk_bytes": 0} == {**c[0], "chunk_bytes": 0}
    assert capped[1]["session"]["configs"][:2] == c[:2]
    # one stream was much slower than several (the injected delay): taken as a per-flow
    # cap, so the first trial is the seed (here the default) with the probe's streams
    first = capped[0]["session"]["history"][0]
    assert (first["technique"], first["config"]) == ("seed", c[1]), \
        capped[0]["session"]["warmup_s"]


def test_a_clearly_slow_trial_is_cut_short(with_server):
    ranks, _ = with_server
    default, seed = ranks[0]["session"]["history"][:2]
    # the default runs its full length; the push/pull seed (space.seeds) is slow on purpose
    assert (default["technique"], default["iterations"]) == ("default", 4)
    assert seed["technique"] == "seed"
    assert {k: seed["config"][k] for k in SLOW} == SLOW
    # stopped on its switch iteration already: far under half the default's speed
    assert seed["iterations"] == 1 and seed["score"] < 0.5 * default["score"]


def test_equals_synchronous_sgd_across_config_switches(with_server):
    ranks, _ = with_server
    transports = {c["transport"] for c in ranks[0]["session"]["configs"]}
    assert transports == {"allreduce", "pushpull"}
    ref = reference(2)
    for r in ranks:
        torch.testing.assert_close(torch.tensor(r["session"]["final"]), ref, rtol=1e-5, atol=1e-6)
        # DDP's own built-in all-reduce until the first configuration that is not the
        # default is put in force; from then on the comm hook, for good (issue 59)
        # (settled on the default: the in-place DDP is built anew without the hook)
        s = r["session"]
        leaving = [c != s["default"] for c in s["configs"]]
        assert s["hooked"] == [any(leaving[:i + 1]) and not (s["settled"][i] and not leaving[i])
                               for i in range(len(leaving))], s["hooked"]
        assert not s["hooked"][0] and True in s["hooked"]


def test_run_is_recorded_in_the_store(with_server):
    from autotune.store import Store

    _, tmp = with_server
    store = Store(tmp / "t.db")
    (run,) = store.runs()
    assert run["status"] == "finished"
    assert len(store.trials(run["id"])) == len(json.loads(json.dumps(with_server[0][0]["session"]["history"])))


def test_best_and_default_are_means_over_their_scored_iterations(with_server):
    from autotune.speedup import MIN_ITERATIONS, Speedup
    from autotune.store import Store

    ranks, tmp = with_server
    s0 = ranks[0]["session"]
    mean, spread, n = s0["measured_best"]
    d_mean, d_spread, d_n = s0["measured_default"]
    # one number everywhere: the session's best is the kept configuration's mean
    assert s0["best_score"] == mean and s0["best_spread"] == spread and n >= 2
    assert s0["default_score"] == d_mean and s0["default_spread"] == d_spread
    # the default's first trial measures it MIN_ITERATIONS times (issue 38); the kept
    # one is confirmed to 4 where the confirm budget allows (6 iterations of 40 here:
    # not always); where not, no speed-up is headlined from them
    assert n >= 2 and d_n >= MIN_ITERATIONS
    shown = Speedup.of(best=(mean, spread, n), reference=(d_mean, d_spread, d_n))
    assert (shown.ratio is not None) == (min(n, d_n) >= MIN_ITERATIONS)
    (run,) = Store(tmp / "t.db").runs()
    assert run["unit"] == s0["unit"] == "it/s"  # no samples_per_step
    assert run["best_score"] == mean and run["best_spread"] == spread
    assert run["default_score"] == d_mean and run["default_spread"] == d_spread


def test_matches_ddp_and_survives_faults(with_faults):
    ranks = with_faults
    for r in ranks:
        torch.testing.assert_close(torch.tensor(r["session"]["final"]), torch.tensor(r["ddp"]),
                                   rtol=1e-5, atol=1e-6)
    hist = ranks[0]["session"]["history"]
    failed = [h for h in hist if h["error"]]
    assert failed, "the injected faults should have failed at least one trial"
    assert all(h["score"] is None for h in failed)
    assert all(h["config"]["streams"] == 2 or h["config"]["chunk_bytes"] == 2097152 for h in failed)
    assert len(ranks[0]["session"]["losses"]) == STEPS
    assert ranks[0]["session"]["sums"] == ranks[1]["session"]["sums"]


def test_a_trial_with_only_its_switch_iteration_is_not_credited_as_faster():
    from autotune.schedule.schedule import SWITCH_MARGIN, trial_seconds

    assert trial_seconds([0.4, 0.6, 0.5], 2.0, cut=False) == 0.5  # the scored iterations
    # cut short on its switch iteration as clearly slow: the optimistic bound, still slow
    assert trial_seconds([], 2.0, cut=True) == 2.0 / SWITCH_MARGIN
    # a one-iteration trial (the budget's last iteration): the switch counts as measured
    assert trial_seconds([], 2.0, cut=False) == 2.0


def test_pinned_and_narrowed_knobs_hold_and_bad_pins_fail_at_start(world, tmp_path):
    """``fixed=``: every trial keeps the pinned chunk size (3 MiB: off the tuner's grid, but
    the runtime runs it) and the narrowed streams; the workers stay identical. A pin the
    runtime cannot run fails at the start on every rank, naming the knob, without a hang."""
    pins = {"chunk_bytes": 3 << 20, "streams": [1, 2]}
    env = {"SESSION_STEPS": "16", "SESSION_BUDGET": "10", "SESSION_FIXED": json.dumps(pins)}
    (tmp_path / "bad").mkdir()
    ranks = world(2).run("session_worker:case", steps=16, budget=10, fixed=pins)
    configs = ranks[0]["session"]["configs"]
    assert {c["chunk_bytes"] for c in configs} == {3 << 20}
    assert {c["streams"] for c in configs} <= {1, 2}
    assert ranks[0]["session"]["sums"] == ranks[1]["session"]["sums"]
    bad = {**env, "SESSION_FIXED": json.dumps({"streams": 20})}
    out = launch(tmp_path / "bad", 2, 0, bad, check=False)
    assert "cannot fix streams=20" in out and "at most 16" in out


@pytest.mark.parametrize("wrap_ddp", [False, True], ids=["native", "inside-ddp"])
def test_once_settled_a_step_costs_no_collective_of_its_own(world, wrap_ddp):
    """A short tuning, then 20 settled iterations of the kept configuration: from then on
    nothing measured can change it, so step() stops measuring. Every rank learns it from
    the leader at the same step; after that step no reduce and no sync of the session's
    own runs (all-reduce keeps no per-iteration sync), and the job still ends as DDP's."""
    steps = 40
    ranks = world(2).run("session_worker:case", steps=steps, budget=4, ddp=True,
                         fixed={"transport": "allreduce"}, wrap_ddp=wrap_ddp)
    for r in ranks:
        torch.testing.assert_close(torch.tensor(r["session"]["final"]), torch.tensor(r["ddp"]),
                                   rtol=1e-5, atol=1e-6)
    s0, s1 = ranks[0]["session"], ranks[1]["session"]
    assert s0["settled"] == s1["settled"] and s0["sums"] == s1["sums"]
    assert True in s0["settled"], "the schedule should settle within the job"
    first = s0["settled"].index(True)
    assert 3 + 4 <= first < steps - 5  # after the warm-up, the trials and the kept figure
    assert all(s0["settled"][first:])
    for s in (s0, s1):
        assert all(n >= 2 for n in s["collectives"][:first + 1])  # the reduce and the sync
        assert s["collectives"][first + 1:] == [0] * (steps - first - 1)
        assert len({str(c) for c in s["configs"][first:]}) == 1
        assert s["alive"] == 1  # a DDP built anew (settled on the default) freed the last


def test_settled_on_the_default_after_trials_the_in_place_ddp_runs_without_the_hook(world):
    """Trials need the comm hook; when the search keeps the default (every other
    configuration here made 50 ms slower), the in-place DDP is built anew without it, the
    old one freed, and the job still ends where DDP's does (issue 59)."""
    slow = ";".join(f"streams={k}@delay:0.05" for k in range(2, 17))
    # only the streams free (intra pinned too: an unslowed intra=root could measure
    # faster than the default by the noise of a loaded machine and be kept)
    r0, r1 = world(2).run("session_worker:case", steps=40, budget=12, ddp=True,
                          fixed={"chunk_bytes": 4 << 20, "transport": "allreduce",
                                 "intra": "flat"},
                          env={"AUTOTUNE_FAULT": slow})
    for r in (r0, r1):
        s = r["session"]
        torch.testing.assert_close(torch.tensor(s["final"]), torch.tensor(r["ddp"]),
                                   rtol=1e-5, atol=1e-6)
        assert s["best"] == s["default"] and True in s["settled"]
        first = s["settled"].index(True)
        assert True in s["hooked"][:first] and s["hooked"][first:] == [False] * (40 - first)
        assert s["ddps"] == 2 and s["alive"] == 1, s


@pytest.mark.parametrize("wrap_ddp", [False, True], ids=["native", "inside-ddp"])
def test_with_the_tuner_off_ddp_runs_its_own_all_reduce_and_no_comm_hook(world, wrap_ddp):
    """``budget=0``: the default all along, DDP's own built-in (C++) all-reduce, no Python
    comm hook at all (issue 59: where nothing can be won, DDP's cost), and the job ends
    where DDP's does."""
    r0, r1 = world(2).run("session_worker:case", steps=12, budget=0, ddp=True, wrap_ddp=wrap_ddp)
    for r in (r0, r1):
        torch.testing.assert_close(torch.tensor(r["session"]["final"]), torch.tensor(r["ddp"]),
                                   rtol=1e-5, atol=1e-6)
        assert r["session"]["hooked"] == [False] * 12
        assert r["session"]["configs"] == [r["session"]["default"]] * 12
