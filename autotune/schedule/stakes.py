"""What a search can win, what it may cost, and what it did: the user's clock.

A user judges autotune by one figure: the job's wall time against plain DDP, the search
included. The trial schedule (:mod:`autotune.schedule.schedule`) therefore asks this module,
once the warm-up has measured the default, how much to search, and tells it every trial
iteration, so that the trials never lose more than a small share of the job's time:

**What is at stake** (:meth:`Stakes.allowance`, at the end of the warm-up). The default's
step ``step_s`` and its *exposed communication* ``exposed_s`` (the least any worker waited
for the averaged gradients after its backward: what no configuration can take away from
compute, and the most any configuration can save per iteration) are medians of the
warm-up. A search costs more than its trial iterations (:class:`SearchCosts`): a fixed
cost before its first trial (importing the Gaussian processes' libraries beside the job,
making the Tuner and its prior) and the decisions each trial iteration waits for, both
measured by the last run on this machine that searched (the store), else
:data:`FIXED_S` and :data:`DECIDE_S`. Then:

* ``exposed_s`` below :data:`NOISE_FLOOR` of the step: nothing a trial could measure is to
  be won: no search, whatever the job's length;
* with ``total_steps`` known: the most the rest of the job can win, ``WIN_SHARE x
  exposed_s x steps left``, less the fixed cost, does not pay for the shortest search
  (:data:`MIN_SEARCH` iterations, each expected to lose :data:`TRIAL_LOSS` of a step and
  its decisions): no search; else the budget is the user's, capped twice: by what that
  win pays for, and by what :data:`SPEND` of the job's predicted time (``total_steps x
  step_s``) leaves after the fixed cost;
* with the length unknown (no ``total_steps``, and no framework that knows it), the job is
  taken to run as long again as it has run: the search starts at the first iteration
  at which that pays for the shortest search and :data:`SPEND` of the job's time so far
  covers the fixed cost (:attr:`Allowance.start_at`); the default runs until then.

**What the trials cost** (:meth:`Stakes.charge`): each trial iteration's seconds beyond
the default's step, net (a trial faster than the default pays back), and the schedule's
own time (:meth:`Stakes.overhead`: making the Tuner, measuring the iterations, the
searchers' and the prior's decisions; every rank waits for them, and no iteration's time
holds them). The default's step is the median of every iteration of the default measured
so far (:meth:`Stakes.default_ran`: the warm-up's, its first dropped, then the Tuner's
reference trial and any later trial of it), and the trials' loss is counted against the
latest: one early iteration alone may be a quarter off, over every trial iteration.
Once the trials have lost :data:`SPEND` of the job's predicted time, the schedule keeps
the best configuration so far (the conservative bandits' rule: the cumulative reward
never falls far below the baseline's; Wu et al., "Conservative Bandits", ICML 2016).

**A job of unknown length** is taken to run about as long again as it has run so far (the
doubling trick for an unknown horizon): at every moment the trials may have lost at most
:data:`SPEND` of the job's *elapsed* time (:meth:`Stakes.tick`: every iteration's seconds,
and the schedule's own). When a trial ends over that line, the search pauses
(:meth:`Stakes.pause`): the best configuration so far runs, uncharged, until the job has
run twice as long as it had at the pause (:meth:`Stakes.may_resume`), and the next trial
starts. A short job gets a short search, a long one its whole budget, with no length
assumed.

**What it saved** (:meth:`Stakes.summary`): the trial iterations, the seconds they lost,
and the iteration at which the kept configuration's saving per iteration pays that back.

**Codec trials wait** (:meth:`Stakes.sensitive_until`): no lossy trial runs in the first
:data:`SENSITIVE` of ``total_steps`` (PyTorch's PowerSGD hook is started after a share of
training, DeepSpeed's 1-bit Adam after a warm-up of 15-25%: early, adaptive optimisers
are sensitive to inexact gradients, and error feedback's delay is correlated).

Nothing here imports torch.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

__all__ = ["DECIDE_S", "FIXED_S", "MIN_SEARCH", "NOISE_FLOOR", "SENSITIVE", "SPEND", "TEST_SHARE",
           "TRIAL_LOSS", "WIN_SHARE", "Allowance", "SearchCosts", "Stakes"]

#: The most of the job's predicted time the trials may lose against the default (the
#: session's ``spend``, by default).
SPEND = 0.05
#: What one trial iteration is expected to lose before any is measured, as a share of the
#: default's step: a trial is cut at ``cut_short`` (0.5) of the best throughput, so one
#: cut on its first scored iteration runs at most about twice the step.
TRIAL_LOSS = 0.5
#: The share of the exposed communication a search is expected to win.
WIN_SHARE = 0.5
#: Trial iterations of the shortest search worth running (the default's reference trial
#: and two or three others).
MIN_SEARCH = 8
#: The most of the iterations left a codec's loss test may take (with the length unknown:
#: of the job's age, the doubling rule): a codec that hurts costs the job while it is
#: tested (issue 62: at 15 Mbit/s the held-out LM's test of top-k 0.1 % ran 38 iterations
#: from iteration 30 and cost about 20 s of a 120 s job), so a test that the rest of the
#: job cannot pay back is not run.
TEST_SHARE = 0.25
#: Exposed communication below this share of the step: nothing measurable to win.
NOISE_FLOOR = 0.02
#: No codec trial in this first share of ``total_steps``.
SENSITIVE = 0.15
#: What a search costs before its first trial on a machine that has not measured it (no
#: earlier run on this host in the store): importing the Gaussian processes' libraries
#: beside the job and making the Tuner, its prior and its searchers. Measured on a 2-core
#: CPU machine, 2 ranks training beside the import: 1.6 s (examples/train_mlp.py) and
#: 2.2 s (examples/train_transformer.py); docs/tuner.md.
FIXED_S = 2.0
#: What each trial iteration costs beside its own seconds, unmeasured: the searchers' and
#: the prior's decisions, GP fits included, while every rank waits. The same machine and
#: jobs: 0.084 s and 0.039 s.
DECIDE_S = 0.06


@dataclass(frozen=True)
class Allowance:
    """The search a job can afford: ``budget`` trial iterations (0: none) and why
    (``None`` when the user's budget stands as it is); ``start_at``: the iteration it may
    start at (a young job of unknown length waits until it has run long enough to pay for
    it; 0: at once); ``stored``: no search, though communication is there to win (a
    search costs more than it would win back), so a stored best may be confirmed instead
    (:meth:`TrialSchedule.start`'s ``proven``)."""

    budget: int
    reason: str | None = None
    start_at: int = 0
    stored: bool = False

    def line(self, instead: str | None = None) -> str | None:
        """The line that says the allowance: with no search, its reason and what runs
        (``instead``, else the default untuned)."""
        if self.reason is None or self.budget > 0:
            return self.reason
        return f"{self.reason}; {instead or 'keeping the default untuned'}"


@dataclass(frozen=True)
class SearchCosts:
    """What a search costs the job beside its trial iterations' own seconds: ``fixed_s``
    before its first trial (the libraries' import beside the job, the Tuner's making) and
    ``per_iteration_s`` each trial iteration (the decisions and switches every rank waits for);
    ``measured``: by an earlier run on this machine (:meth:`from_cost`), not the defaults
    (:data:`FIXED_S`, :data:`DECIDE_S`)."""

    fixed_s: float = FIXED_S
    per_iteration_s: float = DECIDE_S
    measured: bool = False

    @classmethod
    def from_cost(cls, cost: dict, libraries_loaded: bool = False) -> "SearchCosts | None":
        """What an earlier run's :meth:`Stakes.summary` measured (None: it ran no trial
        or did not measure its start); ``libraries_loaded``: this process has imported
        the search's libraries already (their import costs nothing again)."""
        n, setup = cost.get("iterations") or 0, cost.get("setup_s")
        if n <= 0 or setup is None:
            return None
        loading = 0.0 if libraries_loaded else max(0.0, cost.get("loading_s") or 0.0)
        decide = max(0.0, (cost.get("overhead_s") or 0.0) - setup
                     + (cost.get("switch_s") or 0.0)) / n
        return cls(max(0.0, setup) + loading, decide, measured=True)

    def shortest(self, step_s: float) -> float:
        """What the shortest search worth running (:data:`MIN_SEARCH` iterations) is
        expected to lose, its start included, at a step of ``step_s``."""
        return self.fixed_s + MIN_SEARCH * self.iteration(step_s)

    def iteration(self, step_s: float) -> float:
        """What one trial iteration is expected to lose at a step of ``step_s``."""
        return TRIAL_LOSS * step_s + self.per_iteration_s


class Stakes:
    """One job's stakes (module docstring): ``total_steps`` (None: unknown); ``spend``:
    the share of its time the trials may lose (:data:`SPEND` by default; None: no limit,
    the search being the job itself, as in ``autotune tune``: no verdict, no cap, no
    stop, the cost still charged and said)."""

    def __init__(self, total_steps: int | None, spend: float | None = SPEND,
                 costs: SearchCosts | None = None) -> None:
        self.total_steps = total_steps
        self.spend = spend
        self.costs = costs or SearchCosts()  # what a search costs beside its trials
        self.step_s: float | None = None     # the default's step (the median of _default_s)
        self._default_s: list[float] = []    # the default's iterations measured (module doc)
        self._trial_s = 0.0                  # the trial iterations' seconds (failed: none)
        self._failed = 0                     # ... of them failed, charged as two steps
        self.trial_iterations = 0            # iterations charged
        self.overhead_s = 0.0                # the schedule's own time, charged too
        self.setup_s: float | None = None    # of it, the Tuner's making (a fixed cost)
        self.switch_s = 0.0                  # putting the trials' configurations in force
        self.loading_s = 0.0                 # the default's iterations beyond its step
        self.loading_iterations = 0          # ... while the search's libraries loaded
                                             # while the search's libraries loaded
        self.elapsed_s = 0.0                 # the job's time so far (tick, overhead)
        self._known_cap_s = math.inf         # known length: what the trials may lose
        self._paused_at_s: float | None = None  # unknown length: the elapsed time at a pause

    @property
    def known(self) -> bool:
        return self.total_steps is not None

    @property
    def cap_s(self) -> float:
        """What the trials may have lost by now: ``spend`` of the job's predicted time
        (known length), or of its elapsed time (unknown length); no limit without one."""
        if self.spend is None:
            return math.inf
        return self._known_cap_s if self.known else self.spend * self.elapsed_s

    def tick(self, seconds: float) -> None:
        """An iteration (any phase) took ``seconds`` of the job's time (``inf``: a failed
        one, not timed)."""
        if math.isfinite(seconds):
            self.elapsed_s += seconds

    def allowance(self, requested: int, done: int, steps_s: list[float],
             exposed_s: list[float]) -> Allowance:
        """At the end of the warm-up (``done`` iterations ran; ``steps_s`` and
        ``exposed_s``: the default's warm-up steps and exposed communication, the first,
        which pays for allocations, dropped when there are more): the search to run, at
        most ``requested`` iterations, its fixed costs (:attr:`costs`) counted."""
        if not steps_s:
            return Allowance(requested)
        self._default_s = list(steps_s[1:] if len(steps_s) > 1 else steps_s)
        step = self.step_s = _median(steps_s)
        exposed = _median(exposed_s) if exposed_s else None
        if self.spend is None:  # no limit: the user's budget
            return Allowance(requested)
        if exposed is not None and exposed < NOISE_FLOOR * step:
            return Allowance(0, f"nothing to win: communication adds {_ms(exposed)} to a "
                           f"{_ms(step)} step (under {NOISE_FLOOR:.0%})")
        if not self.known:
            return self._plan_unknown(requested, done, step, exposed)
        costs, steps = self.costs, self.total_steps
        self._known_cap_s = self.spend * steps * step
        left = max(0, steps - done)
        per = costs.iteration(step)
        caps = [requested, int((self._known_cap_s - costs.fixed_s) / per)]
        if exposed is not None:
            pays = int((WIN_SHARE * exposed * left - costs.fixed_s) / per)
            if pays < MIN_SEARCH:
                return Allowance(0, f"a search cannot pay for itself: at most {_ms(exposed)} an "
                               f"iteration to win over the {left} iterations left, against "
                               f"{_start(costs)}", stored=True)
            caps.append(pays)
        budget = max(0, min(caps))
        if budget >= requested:
            return Allowance(requested)
        if budget < MIN_SEARCH:
            return Allowance(0, f"a job of {steps} iterations affords no search ({_start(costs)}, "
                           f"{self.spend:.0%} of its predicted time is "
                           f"{self._known_cap_s:.2f} s)", stored=True)
        return Allowance(budget, f"tuning budget {budget} iterations (of {requested}): what a "
                            f"job of {steps} iterations can pay back")

    def _plan_unknown(self, requested: int, done: int, step: float,
                      exposed: float | None) -> Allowance:
        """A job of unknown length is taken to run as long again as it has run (the
        doubling trick): its search starts once what it would win over that many more
        iterations pays for the shortest search, and once its share of the job's time so
        far covers the search's start; until then the default runs."""
        costs = self.costs
        at = max(done, math.ceil(costs.fixed_s / (self.spend * step)))
        if exposed is not None and exposed > 0:
            at = max(at, math.ceil(costs.shortest(step) / (WIN_SHARE * exposed)))
        if at <= done:
            return Allowance(requested)
        return Allowance(requested, f"tuning waits for iteration {at}: a job of unknown length "
                               f"searches once it has run long enough to pay for it "
                               f"({_start(costs)})", start_at=at)

    def charge(self, seconds: float) -> None:
        """A trial iteration ran in ``seconds`` (``inf``: it failed, charged as a slow
        one, two of the default's steps): charged, against the default's step as it is
        now measured (:attr:`lost_s`)."""
        self.trial_iterations += 1
        if math.isfinite(seconds):
            self._trial_s += seconds
        else:
            self._failed += 1

    def default_ran(self, seconds: float) -> None:
        """The default ran a trial iteration (not its first after a switch) in ``seconds``:
        one more sample of its step, which the trials' loss is counted against."""
        if math.isfinite(seconds) and self._default_s:
            self._default_s.append(seconds)
            self.step_s = statistics.median(self._default_s)

    @property
    def lost_s(self) -> float:
        """What tuning lost against the default so far: the trial iterations' seconds
        beyond the default's step (none without a warm-up, which measures it), the
        schedule's own time, the switches and the loading."""
        step = self.step_s
        trials = 0.0 if step is None else (
            self._trial_s + (2 * self._failed - self.trial_iterations) * step)
        return trials + self.overhead_s + self.switch_s + self.loading_s

    @property
    def spent(self) -> bool:
        """Whether the trials have lost all they may by now (:attr:`cap_s`; nothing lost
        is never all: a job with no warm-up has no step to charge against). The wait for
        the search's libraries is charged and said, but it is spent before the first
        trial whatever follows, so it stops no trial (a sunk cost)."""
        lost = self.lost_s - self.loading_s
        return lost > 0 and lost >= self.cap_s

    @property
    def pausable(self) -> bool:
        """Whether a spent search pauses (unknown length: the allowance grows with the
        job) rather than ends (known length)."""
        return not self.known

    def pause(self) -> str | None:
        """The search pauses now (unknown length): it may go on once the job has run
        twice as long (:meth:`may_resume`). What says so the first time (the pauses that
        follow are alike), else None."""
        first, self._paused_at_s = self._paused_at_s is None, self.elapsed_s
        if not first:
            return None
        from autotune.units import fmt_seconds

        return (f"tuning paused: the trials have lost {fmt_seconds(self.lost_s)}, over "
                f"{self.spend:.0%} of the {fmt_seconds(self.elapsed_s)} the job has run; the "
                "search goes on each time the job has run twice as long (pass total_steps "
                "to plan it for the job's length)")

    def stopped_line(self) -> str | None:
        """Where the search ends because the trials have lost their share of a job of
        known length: what says so, else None."""
        if not (self.spent and self.known):
            return None
        from autotune.units import fmt_seconds

        return (f"tuning stopped: the trials lost {fmt_seconds(self.lost_s)}, the "
                f"{self.spend:.0%} of the job's predicted time ({self.total_steps} "
                "iterations) that they may lose")

    def may_resume(self) -> bool:
        """Whether a paused search may go on: the job has doubled its elapsed time since
        the pause, and the trials are back under their share of it."""
        at = self._paused_at_s
        return at is not None and self.elapsed_s >= 2 * at and not self.spent

    def overhead(self, seconds: float) -> None:
        """The schedule spent ``seconds`` deciding (every rank waits for it): charged,
        and on the job's clock."""
        self.overhead_s += seconds
        self.elapsed_s += seconds

    def switch(self, seconds: float) -> None:
        """Putting the schedule's next configuration in force took ``seconds`` on the
        leader while it tuned (its broadcast, the runtime's new groups and buffers: every
        rank waits for them, and no iteration's time holds them): charged, and on the
        job's clock."""
        self.switch_s += seconds
        self.elapsed_s += seconds

    def setup(self, seconds: float) -> None:
        """Making the Tuner took ``seconds`` (a fixed cost, measured for the next run's
        :class:`SearchCosts`; it is charged as the schedule's own time, :meth:`overhead`)."""
        self.setup_s = (self.setup_s or 0.0) + seconds

    def loading(self, seconds: float) -> None:
        """The default ran an iteration in ``seconds`` while the search's libraries were
        imported beside it (a fixed cost of searching): what it took beyond the
        default's step is charged."""
        self.loading_iterations += 1
        if self.step_s is not None and math.isfinite(seconds) and seconds > self.step_s:
            self.loading_s += seconds - self.step_s

    def sensitive_until(self) -> int:
        """The first iteration at which a codec trial may run (0: any; needs the
        job's length)."""
        return 0 if self.total_steps is None else math.ceil(SENSITIVE * self.total_steps)

    def tested_from(self, test_length: int) -> int | None:
        """The first iteration at which a codec the loss test judges may run: where its
        test (``test_length`` iterations) takes at most :data:`TEST_SHARE` of the
        iterations left, past the sensitive phase; with the length unknown, of the job's
        age (it is taken to run as long again). None: never in this job. With no
        ``spend`` limit (the search is the job) only the sensitive phase waits."""
        need = math.ceil(test_length / TEST_SHARE)
        if self.spend is None:
            return self.sensitive_until()
        if self.total_steps is None:
            return need
        at = self.sensitive_until()
        return at if self.total_steps - at >= need else None

    def summary(self, kept_s: float | None, at: int) -> dict[str, float | int | None]:
        """What tuning cost and saved, with the kept configuration's step ``kept_s``
        (None: not measured) and ``at``: the iteration the trials ended at (or the
        iterations done, while they go on): trial ``iterations``, the ``lost_s`` seconds
        tuning lost against the default (``overhead_s`` of them the schedule's own,
        ``setup_s`` the Tuner's making, None when none was made, ``switch_s`` putting
        the configurations in force, ``loading_s`` the default's slower iterations while
        the search's libraries loaded), the kept configuration's ``saved_s`` per
        iteration, the iteration
        ``payback_at`` at which that pays the loss back (None: never; ``at`` when nothing
        was lost), the job's ``total_steps`` (None: unknown) and, when the first trial
        waited for the search's libraries, the default's ``loading`` iterations meanwhile."""
        saved = None if kept_s is None or self.step_s is None else self.step_s - kept_s
        if self.lost_s <= 0:
            payback = at
        elif saved is None or saved <= 0:
            payback = None
        else:
            payback = at + math.ceil(self.lost_s / saved - 1e-9)
        return {"iterations": self.trial_iterations, "lost_s": round(self.lost_s, 4),
                "overhead_s": round(self.overhead_s, 4),
                "setup_s": None if self.setup_s is None else round(self.setup_s, 4),
                "switch_s": round(self.switch_s, 4),
                "loading_s": round(self.loading_s, 4),
                "saved_s": None if saved is None else round(saved, 6),
                "payback_at": payback, "total_steps": self.total_steps,
                **({"loading": self.loading_iterations} if self.loading_iterations else {})}


def _median(values: list[float]) -> float:
    """The median of ``values``, the first dropped when there are more (it pays for
    allocations and connections)."""
    return statistics.median(values[1:] if len(values) > 1 else values)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def _start(costs: SearchCosts) -> str:
    """What starting a search costs, in words, and where the figure comes from."""
    where = "measured on this machine" if costs.measured else "unmeasured here"
    return f"about {costs.fixed_s:.1f} s to start a search, {where}"


def fmt_cost(cost: dict | None) -> str:
    """What tuning cost, in words (:meth:`Stakes.summary`): ``30 trial iterations lost
    0.41 s against the default, paid back by iteration 180``; ``""`` when unknown. With
    the session's ``start_s`` (``Session.tuning_cost``), it ends with what entering the
    session took, which the job pays whether or not it tunes."""
    if not cost:
        return ""
    start = cost.get("start_s")
    said = _fmt_tuning_cost(cost)
    if start is None or start < 0.01:
        return said
    return (f"{said}; the session's start took {start:.2f} s (applying DDP or its comm hook "
            "included)")


def _fmt_tuning_cost(cost: dict) -> str:
    n, lost, payback = cost.get("iterations") or 0, cost.get("lost_s") or 0.0, cost.get("payback_at")
    overhead, loading = cost.get("overhead_s") or 0.0, cost.get("loading_s") or 0.0
    switch = cost.get("switch_s") or 0.0
    if n == 0 and cost.get("loading"):
        slower = f", {loading:.2f} s slower than its step" if loading >= 0.01 else ""
        return (f"no trial ran: the job ended while the search's libraries loaded (the "
                f"default ran {cost['loading']} iterations meanwhile{slower})"
                + ("" if loading >= 0.01 else ": tuning cost nothing"))
    if n == 0:  # the warm-up's and the wait's decisions and syncs, if they add up
        return ("no trial ran: tuning cost nothing" if lost < 0.01 else
                f"no trial ran: the tuner's own time cost {lost:.2f} s")
    head = f"tuning {'lost' if lost > 0 else 'gained'} {abs(lost):.2f} s against the default"
    # the parts, signed, so that none reads as larger than the whole
    trials = lost - overhead - loading - switch
    parts = [f"{n} trial iterations {'+' if trials >= 0 else '-'}{abs(trials):.2f} s"]
    if overhead >= 0.01:
        parts.append(f"the tuner's decisions +{overhead:.2f} s")
    if switch >= 0.01:
        parts.append(f"switching configurations +{switch:.2f} s")
    if loading >= 0.01:
        parts.append(f"waiting for its libraries +{loading:.2f} s")
    head += f" ({', '.join(parts)})"
    if lost <= 0:
        return head
    total = cost.get("total_steps")
    if payback is None:
        return head + ", not paid back (the kept configuration is no faster)"
    if total is not None and payback > total:
        return head + (f", not paid back within the job's {total} iterations (it would "
                       f"be by iteration {payback})")
    return head + f", paid back by iteration {payback}"
