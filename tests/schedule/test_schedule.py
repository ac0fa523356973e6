"""The trial schedule as a state machine, without processes: a real Tuner over a real
space, iteration times from a function of the configuration."""

from __future__ import annotations

import math
import re

import pytest

from autotune.speedup import MIN_ITERATIONS, Speedup
from autotune.schedule.schedule import (LOCKED, PROBE_STREAMS, REFERENCE_ITERATIONS,
                                      SETTLED_SAMPLES, SWITCH_MARGIN, TRIAL, WARMUP, Drift,
                                      Listener, TrialSchedule, flow_probe)
from autotune.schedule.ledger import Ledger
from autotune.schedule.stakes import SearchCosts
from autotune.tuning.space import SearchSpace
from autotune.tuning.tuner import Tuner


def seconds_of(config) -> float:
    """More streams and push/pull are faster; 1 s for the default."""
    s = 1.0 / (1 + 0.2 * (config["streams"] - 1))
    return s * (0.5 if config["transport"] == "pushpull" else 1.0)


class Heard(Listener):
    def __init__(self):
        self.events = []

    def tuning(self, budget):
        self.events.append(("tuning", budget))

    def trial_started(self, index, trial):
        self.events.append(("start", index))

    def trial_finished(self, record):
        self.events.append(("finish", record.index, record.error))

    def locked(self, kept, passed_over=None):
        self.events.append(("locked", kept))

    def kept_measured(self, kept):
        self.events.append(("measured", kept))

    def say(self, text):
        self.events.append(("say", text))


def make(space=None, budget=20, trial_iterations=2, **kw):
    space = space or SearchSpace.build(k_max=2)
    ledger = Ledger(space, None)
    heard = Heard()

    def new_tuner(b, seed, warm, space, warmup):
        return Tuner(space, budget=b, seed=seed, warm_start=warm,
                     techniques=("grid", "pbt"), reference=space.default(),
                     reference_iterations=REFERENCE_ITERATIONS,  # as a session's JobTuners
                     trial_iterations=trial_iterations)

    kw.setdefault("listener", heard)
    kw.setdefault("costs", SearchCosts(0.0, 0.0))  # the stakes' own tests count them
    return TrialSchedule(space, ledger, new_tuner, budget=budget, **kw), heard


def drive(schedule, config, n, time_of=seconds_of):
    """Run ``n`` iterations; the configurations run, in order."""
    ran = []
    for _ in range(n):
        ran.append(config)
        config = schedule.next(config, time_of(config))
    return ran, config


def test_warmup_runs_the_default_and_is_no_trial():
    s, heard = make(warmup=3)
    first = s.start(s.space.seeds())
    assert first == s.space.default() and s.phase == WARMUP
    ran, nxt = drive(s, first, 3)
    assert ran == [s.space.default()] * 3
    assert s.warmup_times == [1.0] * 3 and s.probe_times == []
    assert s.ledger.history == [] and s.phase == TRIAL and s.trial_phase.iterations == 0
    assert s.trial_phase.trial is not None and nxt == s.trial_phase.trial.config
    assert ("tuning", 20) in heard.events and ("start", 0) in heard.events


def test_flow_probe_is_the_last_warmup_and_seeds_the_capped_case():
    s, _ = make(warmup=3, probe=True, capped=lambda times, probe: True)
    cfg = s.start([])
    ran, _ = drive(s, cfg, 3)
    assert ran[2] == {**s.space.default(), "streams": PROBE_STREAMS}
    assert len(s.probe_times) == 1 and len(s.warmup_times) == 2
    # the capped case: the seeds with the probe's streams are the first trials
    assert s.trial_phase.trial.config == {**s.space.seeds()[0], "streams": PROBE_STREAMS}
    assert s.trial_phase.trial.technique == "seed"  # what it is: a seed, not a warm start


def test_no_probe_without_two_warmups_or_when_not_capped():
    assert make(warmup=1, probe=True)[0].warmup_phase.probe is None
    s, _ = make(warmup=3, probe=True, capped=lambda times, probe: False)
    drive(s, s.start([]), 3)
    assert s.trial_phase.trial.config == s.space.default()  # uncapped: the default first, as ever


def test_switch_iteration_is_not_scored():
    s, _ = make(warmup=0, trial_iterations=4, cut_short=None)
    cfg = s.start([])
    trial = s.trial_phase.trial
    times = iter([10.0] + [0.5] * 20)
    for _ in range(trial.iterations):
        cfg = s.next(cfg, next(times))
    rec = s.ledger.history[0]
    assert rec.score == pytest.approx(1 / 0.5) and rec.switch_s == 10.0
    assert rec.iterations == trial.iterations


def test_a_trial_is_one_record_from_its_ask_to_the_ledger():
    """Issue 60: one trial is one object. The Tuner asks for it (``asked``), the schedule
    runs it (``running``), it ends ``scored``, ``cut`` or ``failed``; the Tuner's history
    and the ledger's hold that same object, its switch iteration filled in as it ran (not
    patched onto a copy), its number the run's."""
    from autotune.tuning.trial import ASKED, CUT, FAILED, RUNNING, SCORED

    s, _ = make(warmup=0, budget=40, cut_short=0.5, trial_iterations=3)
    cfg = s.start([])
    first = s.trial_phase.trial
    assert first.state == RUNNING and first.left == first.iterations
    slow = {**s.space.default(), "streams": 2}

    def time_of(c):  # the default fast, one configuration failing, the rest 10x slower
        return 0.1 if c == s.space.default() else math.inf if c == slow else 1.0

    asked = []
    for _ in range(30):
        trial = s.trial_phase.trial
        if trial is not None and trial not in asked:
            asked.append(trial)
        cfg = s.next(cfg, time_of(cfg))
    tuner, history = s.tuner, s.ledger.history
    assert history and all(any(r is t for t in tuner.history) for r in history)
    assert [r.index for r in history] == list(range(len(history)))
    ended = {r.state for r in history}
    assert ended <= {SCORED, CUT, FAILED} and SCORED in ended and CUT in ended, ended
    assert all(r.switch_s is not None for r in history if r.state != FAILED)
    for r in history:
        assert any(r is t for t in asked)  # the object the schedule ran
        assert (r.state == FAILED) == (r.score is None)
        assert r.state != CUT or r.iterations < 3
    # what the Tuner hands out next is asked, not yet running
    nxt = s.tuner.ask() if not s.tuner.done else None
    assert nxt is None or (nxt.state == ASKED and nxt.score is None)


def test_clearly_slow_trials_end_early_and_give_iterations_back():
    s, _ = make(warmup=0, budget=40, cut_short=0.5)
    cfg = s.start([])

    def time_of(c):  # everything but the default is 10x slower
        return 0.1 if c == s.space.default() else 1.0

    drive(s, cfg, 30, time_of)
    slow = [r for r in s.ledger.history if r.config != s.space.default() and r.score]
    assert slow, "some trial of another configuration ran"
    # cut on the switch iteration: 10x slower is below cut_short even after SWITCH_MARGIN
    assert all(r.iterations == 1 for r in slow)
    assert all(r.score == pytest.approx(SWITCH_MARGIN / 1.0) for r in slow)  # 1 s / margin


def test_failed_iteration_fails_the_trial_and_moves_on():
    s, heard = make(warmup=0)
    cfg = s.start([])
    index = s.trial_phase.trial.index
    nxt = s.next(cfg, math.inf, "rank 1 timed out")
    rec = s.ledger.history[-1]
    assert rec.score is None and rec.error == "rank 1 timed out"
    assert s.ledger.failures == [rec] and s.trial_phase.trial.index == index + 1 and nxt == s.trial_phase.trial.config
    assert ("finish", 0, "rank 1 timed out") in heard.events


def test_rejected_configuration():
    s, _ = make(warmup=2)
    cfg = s.start([])
    # outside a trial: the fallback (nothing ran yet: the default), or the default
    assert s.rejected({**cfg, "streams": 3}, "no") == s.space.default()
    drive(s, cfg, 2)
    bad = s.trial_phase.trial.config
    nxt = s.rejected(bad, "no group for stream 3")
    assert s.ledger.history[-1].error == "could not apply the configuration: no group for stream 3"
    assert nxt == s.trial_phase.trial.config


def test_budget_spent_locks_the_best():
    s, heard = make(warmup=0, budget=30)
    cfg = s.start(s.space.seeds())
    for _ in range(200):
        if s.phase == LOCKED:
            break
        cfg = s.next(cfg, seconds_of(cfg))
    assert s.phase == LOCKED and not s.tuning
    scored = [r for r in s.ledger.history if r.score]
    assert cfg == s.kept == max(scored, key=lambda r: r.score).config
    assert heard.events[-1] == ("locked", s.kept)
    assert s.next(cfg, seconds_of(cfg)) == s.kept  # stays


def test_settled_iterations_are_scored_iterations_of_the_kept_configuration():
    s, _ = make(warmup=0, budget=30)
    cfg = s.start(s.space.seeds())
    while s.phase != LOCKED:
        cfg = s.next(cfg, seconds_of(cfg))
    kept = s.kept
    mean, _, n = s.ledger.measured(kept)
    assert mean == pytest.approx(1 / seconds_of(kept))
    others = {k: list(v) for k, v in s.ledger.samples.items() if k != s.space.key(kept)}
    # the first iteration after the last trial switches to the kept configuration (unless
    # the last trial was it): not scored; then 3 settled iterations, twice as slow
    switch = s.ledger.history[-1].config != kept
    slow = 2 * seconds_of(kept)
    for _ in range(4):
        cfg = s.next(cfg, slow)
    assert cfg == kept
    scored = 4 - switch
    mean2, _, n2 = s.ledger.measured(kept)
    assert n2 == n + scored
    assert mean2 == pytest.approx((n * mean + scored / slow) / (n + scored))
    # a failed iteration is no score; nothing else's samples change
    s.next(cfg, float("inf"))
    assert s.ledger.measured(kept)[2] == n2
    assert {k: v for k, v in s.ledger.samples.items() if k != s.space.key(kept)} == others
    # only the first SETTLED_SAMPLES after tuning: a later, slower compute step (no
    # re-tune) does not move the mean away from the default's, measured during the trials
    for _ in range(SETTLED_SAMPLES + 10):
        cfg = s.next(cfg, 10 * slow)
    assert s.ledger.measured(kept)[2] == n + SETTLED_SAMPLES


def test_near_ties_faster_than_the_default_race_past_the_budget_and_say_so_once():
    # push/pull at 2, 3 and 4 streams within 3 % of each other, all twice the default's
    # speed, 4 % noise an iteration: with overtime (as a session's Tuner has it) the
    # trials go on past the budget among them alone, the listener hears it once, and
    # the schedule locks when the overtime is spent (or one is left)
    import random

    rng = random.Random(3)
    space = SearchSpace.build(k_max=2, max_streams=4, transports=("allreduce", "pushpull"))
    ties = {2: 0.5, 3: 0.49, 4: 0.505}

    def time_of(config):
        base = ties.get(config["streams"], 0.7) if config["transport"] == "pushpull" else 1.0
        return base * (1 + rng.gauss(0, 0.04))

    overtimes = []

    class Heard2(Heard):
        def overtime(self, contenders, iterations):
            overtimes.append((contenders, iterations))

    def new_tuner(b, seed, warm, space, warmup):
        return Tuner(space, budget=b, seed=seed, warm_start=warm, techniques=("grid",),
                     reference=space.default(), reference_iterations=REFERENCE_ITERATIONS,
                     trial_iterations=2, overtime=1.0)

    s = TrialSchedule(space, Ledger(space, None), new_tuner, budget=24, warmup=0,
                      listener=Heard2(), costs=SearchCosts(0.0, 0.0))
    cfg = s.start([{**space.default(), "transport": "pushpull", "servers": 2, "streams": n}
                   for n in (2, 3, 4)])
    for _ in range(200):
        if s.phase == LOCKED:
            break
        cfg = s.next(cfg, time_of(cfg))
    assert s.phase == LOCKED
    assert len(overtimes) == 1 and overtimes[0][0] >= 2 and overtimes[0][1] == 24
    past = [r for r in s.ledger.history if r.index >= 0][-1]
    trials = sum(r.iterations for r in s.ledger.history)
    assert 24 < trials <= 48, trials
    assert past.technique == "confirm" and past.config["transport"] == "pushpull"
    assert s.kept["transport"] == "pushpull" and s.kept["streams"] in ties


def test_budget_zero_keeps_the_first_warm_start():
    s, heard = make(budget=0)
    pushpull = s.space.seeds()[1]
    assert s.start([pushpull]) == pushpull and s.phase == LOCKED and s.tuner is None
    assert heard.events == []
    s2, _ = make(budget=10)
    assert s2.start([], keep=pushpull) == pushpull and s2.phase == LOCKED


@pytest.mark.parametrize("warmup,spent", [(3, MIN_ITERATIONS), (0, REFERENCE_ITERATIONS)])
def test_the_default_is_measured_long_enough_for_a_speedup(warmup, spent):
    """Issue 38: a short session (budget 20) measures the default over MIN_ITERATIONS
    scored iterations in its first trial, so its table shows a speed-up, not "– (n<4)".
    Right after the warm-up (which ran the default) that trial has no switch and takes
    MIN_ITERATIONS; after another configuration it pays one switch iteration more."""
    s, heard = make(warmup=warmup, budget=20)
    cfg = s.start(s.space.seeds())
    while s.phase != LOCKED:
        cfg = s.next(cfg, seconds_of(cfg))
    default = s.space.default()
    first = next(r for r in s.ledger.history if r.config == default)
    assert first.iterations == spent and first.technique == "default"
    assert (first.switch_s is None) == (warmup > 0)
    assert s.ledger.measured(default)[2] >= MIN_ITERATIONS
    assert sum(r.iterations for r in s.ledger.history) <= 20
    for _ in range(SETTLED_SAMPLES + 1):
        cfg = s.next(cfg, seconds_of(cfg))
    assert heard.events.count(("measured", s.kept)) == 1  # its figure is final once
    shown = Speedup.of(s.ledger.measured(s.kept), s.ledger.measured(default))
    assert shown.refused is None and shown.ratio == pytest.approx(
        seconds_of(default) / seconds_of(s.kept))


def test_a_trial_that_did_not_switch_scores_its_first_iteration():
    s, _ = make(warmup=0, budget=20, cut_short=None)
    cfg = s.start(s.space.seeds())
    while s.phase != LOCKED:
        cfg = s.next(cfg, seconds_of(cfg))
    history = s.ledger.history
    for before, rec in zip(history, history[1:]):
        # a switch iteration is timed apart (switch_s) and not scored
        assert (rec.switch_s is None) == (rec.config == before.config), rec


def test_a_configuration_kept_untuned_is_scored_after_a_warmup():
    s, heard = make(budget=0, warmup=3)
    pushpull = s.space.seeds()[1]
    cfg = s.start([pushpull])
    for i in range(3 + SETTLED_SAMPLES + 5):
        # the first iterations pay for first allocations: far slower, never scored
        cfg = s.next(cfg, 10.0 if i < 3 else seconds_of(cfg))
    assert s.ledger.measured(pushpull) == pytest.approx((1 / seconds_of(pushpull), 0.0,
                                                         SETTLED_SAMPLES))
    assert heard.events == [("measured", pushpull)]


def test_drift_starts_a_short_retune_from_the_old_best():
    s, heard = make(warmup=0, budget=20, drift=Drift(0.2, 5, 8))
    cfg = s.start(s.space.seeds())
    while s.phase != LOCKED:
        cfg = s.next(cfg, seconds_of(cfg))
    old = s.kept
    for _ in range(5):  # the same speed: no re-tune
        cfg = s.next(cfg, seconds_of(cfg))
    assert s.phase == LOCKED
    for _ in range(5):  # 3x slower
        cfg = s.next(cfg, 3 * seconds_of(cfg))
    assert s.phase == TRIAL and s.tuner.budget == 8 and s.best is None
    assert s.trial_phase.trial.config == old and s.trial_phase.trial.technique == "warm"
    assert s.ledger.samples == {}  # measured on the job before the change: forgotten
    # the kept figure was final before its 20 settled iterations: said before the re-tune
    events = heard.events
    assert events.index(("measured", old)) < len(events) - 1 - events[::-1].index(("tuning", 8))
    said = [e[1] for e in heard.events if e[0] == "say" and "drifted" in e[1]]
    assert said and re.search(r"iteration time drifted.* from [\d.]+ m?s to [\d.]+ m?s "
                              r"\([\d.,]+ it/s to [\d.,]+ it/s\): re-tuning", said[0]), said
    assert "e+" not in said[0]


def locked_with_drift(window=5, threshold=0.2, compute=1.0, comm=None):
    """A schedule tuned to the end with a drift watch, fed ``compute`` seconds of compute
    plus ``comm(config)`` of communication per iteration, with its baseline window
    measured: (schedule, the kept configuration)."""
    comm = comm or seconds_of
    s, _ = make(warmup=0, budget=20, drift=Drift(threshold, window, 8))
    cfg = s.start(s.space.seeds())
    while s.phase != LOCKED:
        cfg = s.next(cfg, compute + comm(cfg), comm_s=comm(cfg))
    for _ in range(window):  # the baseline
        cfg = s.next(cfg, compute + comm(cfg), comm_s=comm(cfg))
    assert s.phase == LOCKED and s.retunes == []
    return s, cfg


def run_locked(s, cfg, n, compute, comm):
    """``n`` more iterations; the iterations at which a re-tune started."""
    for _ in range(n):
        cfg = s.next(cfg, compute + comm(cfg), comm_s=comm(cfg))
    return s.retunes


@pytest.mark.parametrize("factor", [3.0, 0.25], ids=["link slower", "link faster"])
def test_a_change_of_the_communication_time_either_way_starts_a_retune(factor):
    # compute 0.1 s: communication is most of the iteration
    s, cfg = locked_with_drift(compute=0.1)
    kept = dict(cfg)
    start = s.iteration
    assert run_locked(s, cfg, 5, 0.1, lambda c: factor * seconds_of(c)) == [start + 5]
    assert s.phase == TRIAL and s.trial_phase.trial.config == kept and s.tuner.budget == 8


def test_a_longer_compute_step_starts_no_retune():
    s, cfg = locked_with_drift()
    # compute 3x longer, communication as before: the iteration is much slower, but no
    # configuration can help
    assert run_locked(s, cfg, 50, 3.0, seconds_of) == []
    assert s.phase == LOCKED


def test_small_changes_of_the_communication_time_start_no_retune():
    s, cfg = locked_with_drift(threshold=0.2, compute=1.0)
    base = seconds_of(cfg)
    it = 1.0 + base
    # +/- 15 % of the iteration time in communication: under the threshold
    assert run_locked(s, cfg, 10, 1.0, lambda c: seconds_of(c) + 0.15 * it) == []
    assert run_locked(s, cfg, 10, 1.0, lambda c: max(0.0, seconds_of(c) - 0.15 * it)) == []
    assert run_locked(s, cfg, 5, 1.0, lambda c: seconds_of(c) + 0.25 * it) != []


def test_the_baseline_is_measured_again_after_a_retune():
    s, cfg = locked_with_drift(window=4)
    slower = lambda c: 3 * seconds_of(c)  # noqa: E731
    for _ in range(4):
        cfg = s.next(cfg, 1.0 + slower(cfg), comm_s=slower(cfg))
    assert len(s.retunes) == 1
    while s.phase != LOCKED:
        cfg = s.next(cfg, 1.0 + slower(cfg), comm_s=slower(cfg))
    # the link stays slow: the new kept configuration's baseline is the slow link, so
    # no second re-tune
    assert run_locked(s, cfg, 40, 1.0, slower) == s.retunes[:1]


def test_server_loss_mid_trial_starts_over_on_the_smaller_space(tmp_path):
    from autotune.store import Store

    s, heard = make(warmup=0, budget=40)
    store = Store(tmp_path / "t.db")
    s.ledger.store = store
    s.ledger.run_id = store.start_run(job="j", world={}, backend="gloo", model_graph=None,
                                      topology_graph=None, space_facts={}, unit="it/s")
    cfg = s.start(s.space.seeds())
    cfg = s.next(cfg, seconds_of(cfg))
    left_before = s.tuner.remaining
    small = SearchSpace.build(k_max=0, max_streams=4, transports=("allreduce",))
    s.servers_lost(small, [2], "rank 2 stopped", cfg)
    assert [t["technique"] for t in store.trials(s.ledger.run_id)] == ["fault"]
    assert any(e[0] == "say" and "lost server(s)" in e[1] for e in heard.events)
    nxt = s.next(cfg, math.inf, "server lost")
    assert s.ledger.history[-1].error == "server lost"  # the trial under way failed
    assert s.space is small and s.tuner.space is small
    assert s.tuner.budget <= left_before
    assert small.contains(nxt)


def test_server_loss_after_lock_keeps_what_still_runs():
    s, _ = make(warmup=0, budget=20)
    cfg = s.start([s.space.default()])
    while s.phase != LOCKED:
        cfg = s.next(cfg, 1.0 if cfg["transport"] == "allreduce" else 2.0)
    assert cfg["transport"] == "allreduce"
    small = SearchSpace.build(k_max=0, max_streams=16, transports=("allreduce",))
    s.servers_lost(small, [2], "gone", cfg)
    assert s.next(cfg, 1.0) == cfg and s.phase == LOCKED


@pytest.mark.parametrize("kw, words", [({"budget": -1}, "budget"), ({"warmup": -2}, "warmup"),
                                       ({"cut_short": 1.5}, "cut_short")])
def test_bad_arguments_are_autotune_errors_naming_the_argument(kw, words):
    from autotune.errors import ArgumentError

    with pytest.raises(ArgumentError, match=words):
        make(**kw)


def test_the_flow_probe_cuts_chunks_so_that_every_stream_carries_one():
    space = SearchSpace.build(k_max=2)
    default = space.default()
    big = flow_probe(space, 64 * default["chunk_bytes"])  # many default chunks: unchanged
    assert big == {**default, "streams": PROBE_STREAMS}
    small = flow_probe(space, 2 * 2**20)  # 2 MiB: one default (4 MiB) chunk would carry it all
    assert small["streams"] == PROBE_STREAMS
    assert small["chunk_bytes"] * PROBE_STREAMS <= 2 * 2**20 < small["chunk_bytes"] * 2 * PROBE_STREAMS
    tiny = flow_probe(space, 1000)  # smaller than any chunk: the smallest
    assert tiny["chunk_bytes"] == min(space["chunk_bytes"].values)
    # the session's capped seeds take the probe's chunks when smaller than theirs
    s, _ = make(space=space, warmup=3, probe=True, capped=lambda times, probe: True, gradient_bytes=2 * 2**20)
    ran, _ = drive(s, s.start([]), 3)
    assert ran[2] == small
    assert s.trial_phase.trial.config == {**space.seeds()[0], "streams": PROBE_STREAMS,
                              "chunk_bytes": small["chunk_bytes"]}


def test_the_first_trial_waits_for_the_tuners_imports(tmp_path, monkeypatch):
    """The Tuner's libraries import in a background thread (autotune.tuning.preload); an
    iteration timed beside the import is slower than its configuration makes it, so no
    trial runs until the import is done: the default runs meanwhile, unscored."""
    import time

    from autotune.schedule.schedule import LOADING
    from autotune.schedule.stakes import fmt_cost
    from autotune.tuning.preload import loading, preload

    name = f"slow_import_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text("import time\ntime.sleep(0.5)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    space = SearchSpace.build(k_max=2)

    def new_tuner(b, seed, warm, space, warmup):
        preload(name)  # as a Tuner with a prior or a Bayesian searcher does
        return Tuner(space, budget=b, seed=seed, warm_start=warm, techniques=("grid",),
                     reference=space.default(), reference_iterations=REFERENCE_ITERATIONS)

    # a long job: the 10 s iterations beside the import, charged, leave the trials room
    s = TrialSchedule(space, Ledger(space, None), new_tuner, budget=20, warmup=2,
                      total_steps=100_000)
    cfg = s.start([])
    _, cfg = drive(s, cfg, 2)  # the warm-up; the Tuner is made at its end
    assert s.phase == LOADING and cfg == space.default() and loading()
    waited = 0
    deadline = time.monotonic() + 30
    while s.phase == LOADING and time.monotonic() < deadline:
        assert cfg == space.default()
        cfg = s.next(cfg, 10.0)  # slowed by the import: never scored
        waited += 1
        if waited == 3:  # a job that ended here ran no trial, and says why
            assert s.cost()["iterations"] == 0 and s.cost()["loading"] == 3
            # ... and what the default lost beside the import, charged (10 s against 1 s)
            assert fmt_cost(s.cost()) == (
                "no trial ran: the job ended while the search's libraries loaded (the "
                "default ran 3 iterations meanwhile, 27.00 s slower than its step)")
        time.sleep(0.01)
    assert not loading() and s.phase == TRIAL and waited >= 5
    assert s.cost()["loading"] == waited
    assert s.ledger.history == [] and s.trial_phase.iterations == 0
    assert s.ledger.measured(space.default()) is None or \
        s.ledger.measured(space.default())[2] == 0
    while s.phase != LOCKED:
        cfg = s.next(cfg, seconds_of(cfg))
    # the default's figure is its trial's (1 s), not the loading iterations' (10 s)
    assert s.ledger.measured(space.default())[0] == pytest.approx(1.0)


def test_settled_once_the_kept_figure_is_final_and_nothing_watches_it():
    s, _ = make(warmup=0, budget=10)
    cfg = s.start(s.space.seeds())
    while s.phase != LOCKED:
        assert not s.settled
        cfg = s.next(cfg, seconds_of(cfg))
    for _ in range(SETTLED_SAMPLES):  # the kept configuration's figure (and a switch)
        assert not s.settled
        cfg = s.next(cfg, seconds_of(cfg))
    cfg = s.next(cfg, seconds_of(cfg))
    assert s.settled and s.next(cfg, seconds_of(cfg)) == cfg
    # a lost server: the tuning may start over, so nothing is settled
    small = SearchSpace.build(k_max=0, max_streams=16, transports=("allreduce",))
    s.servers_lost(small, [2], "gone", cfg)
    assert not s.settled
    # a drift watch keeps watching: never settled
    d, _ = make(warmup=0, budget=10, drift=Drift(0.2, 5, 8))
    cfg = d.start(d.space.seeds())
    for _ in range(200):
        cfg = d.next(cfg, seconds_of(cfg))
        assert not d.settled
