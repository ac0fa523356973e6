"""The leader's part of a session: its run in the store, the trial schedule and its
Tuners, and the run's end.

The leader (the first worker) tunes for every rank: :meth:`Leader.start` opens the run
in the store (:mod:`autotune.leader.record`), makes the trials' record
(:class:`~autotune.schedule.ledger.Ledger`), the job's Tuners with the physics prior
(:class:`~autotune.leader.tuners.JobTuners`) and the trial schedule
(:class:`~autotune.schedule.schedule.TrialSchedule`) that says what each iteration runs,
and picks the first configuration: the default, the stored best or the warm start.
:meth:`Leader.close` closes the run. The other ranks have no leader: they put in force
what the leader's configuration, sent each step, says.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from autotune.leader.display import SessionDisplay
from autotune.leader.record import SessionRun
from autotune.leader.tuners import OVERTIME, JobTuners
from autotune.options import SessionOptions
from autotune.schedule.ledger import Ledger
from autotune.schedule.schedule import Drift, TrialSchedule
from autotune.tuning.space import Config, SearchSpace
from autotune.tuning.tuner import GP_LIBRARIES

DDP = torch.nn.parallel.DistributedDataParallel


class Leader:
    """The leader's tuning: ``ledger`` (the trials), ``schedule`` (what runs next) and
    ``tuners``, made by :meth:`start`."""

    def __init__(self, options: SessionOptions, run: SessionRun,
                 display: SessionDisplay) -> None:
        self.options = options
        self.run = run
        self.display = display
        self.ledger: Ledger | None = None
        self.schedule: TrialSchedule | None = None
        self.tuners: JobTuners | None = None

    def start(self, model: torch.nn.Module, info: Any, space: SearchSpace,
              params: Sequence[torch.nn.Parameter], backend: str, score_unit: str, *,
              link: dict[str, float], drift: Drift | None, goodput: bool) -> Config:
        """Open the run, make the schedule and its Tuners; the first configuration to run.
        ``link``: the link as the workers timed it (for the prior); ``goodput``: lossy
        codecs are scored by goodput."""
        o, budget, run = self.options, self.options.budget, self.run
        if o.store:  # fingerprinted as the module, with or without DDP around it
            module = model.module if isinstance(model, DDP) else model
            run.open(module, info, backend, space, score_unit)
        self.ledger = Ledger(space, None, run.store, run.run_id, elsewhere=run.elsewhere)
        tuners = self.tuners = JobTuners(
            info, params, techniques=o.techniques, trial_iterations=o.trial_iterations,
            samples_per_step=o.samples_per_step, prior=o.prior, link=link,
            stored=run.stored_calibration(),
            overtime=0.0 if o.spend is None else OVERTIME)  # no spend: the budget is the job
        if len(info.workers) == 1 and budget:
            self.display.say("one worker: no gradient crosses the wire, so tuning has nothing "
                             "to gain; keeping the default (or the stored best) untuned")
            budget = 0
        self.schedule = TrialSchedule(
            space, self.ledger, tuners, budget=budget, warmup=o.warmup,
            cut_short=o.cut_short, samples_per_step=o.samples_per_step, drift=drift,
            seed=o.seed, probe=info.n_machines > 1, capped=tuners.capped,
            listener=self.display, gradient_bytes=sum(tuners.sizes), goodput=goodput,
            total_steps=o.total_steps, spend=o.spend,
            costs=run.search_costs(list(GP_LIBRARIES)))
        warm = run.warm_start(space)
        # torchrun --max-restarts brought the job back: no tuning again
        restarted = run.restarted_best(space)
        # what came from the store says which run, in the table and in the store: at once
        # where it is kept untuned, else once the schedule uses it (a search starts, or a
        # job that affords none tries a stored best that had beaten its default)
        if restarted is not None or budget == 0:
            stored, said = run.provenance(warm, restarted, budget)
            for config, origin in stored:
                self.ledger.came_from(config, origin)
            first = self.schedule.start(warm, keep=restarted)
            if said is not None:  # through the tuning display, once it is there
                self.display.say(said)
            return first
        return self.schedule.start(warm, stored=run.stored_start(warm, budget))

    def close(self, status: str, kept: Config | None, cost: dict | None) -> None:
        """Close the run as ``status`` with the configuration ``kept`` and what tuning
        ``cost``; keep the prior's calibration for the next run on this machine."""
        if self.ledger is not None:
            self.ledger.close(status, kept=kept, cost=cost)
        if self.tuners is not None and self.tuners.model is not None:
            self.run.save_calibration(self.tuners.model)
