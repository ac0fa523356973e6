"""The configuration in force on every rank, and how one gets there: the session's
apply-and-retry loop.

:class:`InForce` is the one holder of "what runs now" on a rank: the configuration the
runtime behind the hook last put in force (as a point of the job's space) and the space
itself, which shrinks when servers are lost. :meth:`InForce.put` puts a configuration in
force on every rank (:meth:`~autotune.sessions.hooked.HookedDDP.put_in_force`) until one
is: one that cannot be applied fails identically on every rank, and the leader's trial
schedule says what instead (the trial fails, or the fallback); the other ranks put what
the leader sends. Lost servers shrink the space, and the leader's schedule starts the
tuning over on what is left.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.leader.tuners import job_space
from autotune.options import SessionOptions
from autotune.runtime.config import ConfigError
from autotune.runtime.errors import RuntimeFault, ServerLost
from autotune.tuning.lossy import SCORED_AS_LOSSLESS
from autotune.tuning.space import Config, SearchSpace

if TYPE_CHECKING:
    from autotune.schedule.schedule import TrialSchedule
    from autotune.sessions.hooked import HookedDDP

#: Configurations tried in a row before putting one in force is given up as broken.
MAX_APPLY_TRIES = 1000


class InForce:
    """The configuration in force and the job's space on one rank (module docstring).
    ``schedule``: the leader's trial schedule (None on the other ranks), given at
    :meth:`start`."""

    def __init__(self, hooked: HookedDDP, options: SessionOptions) -> None:
        self.hooked = hooked
        self.options = options
        self.space: SearchSpace | None = None
        self.config: Config | None = None
        self.schedule: TrialSchedule | None = None
        self._servers_dropped = False

    def space_of_job(self) -> SearchSpace:
        """The job's space, from the runtime's limits and the session's options (built at
        the start, and again once servers are lost)."""
        self.space = job_space(self.hooked.rt, allow_lossy=self.options.allow_lossy,
                               fixed=self.options.fixed)
        return self.space

    @property
    def lossy(self) -> bool:
        """Whether the configuration in force runs a codec that the efficiency probe
        measures as one (the same on every rank): not one
        :data:`~autotune.tuning.lossy.SCORED_AS_LOSSLESS`, whose average, exact to fp16's
        rounding, feeds the gradient noise scale as a lossless one's does (issue 62: a
        wait under fp16 had left the noise scale unstable, and every codec trial of the
        search failed for it)."""
        return (self.config or {}).get("compression", "none") not in ("none",
                                                                     *SCORED_AS_LOSSLESS)

    def put(self, config: Config | None, retrying: bool = False,
            background: bool = False) -> None:
        """Put ``config`` (None on the other ranks: what the leader sends) in force on
        every rank, or what the leader's schedule says instead, until one is
        (``retrying``: after a failed iteration, when the schedule's answer is the
        fallback). ``background``: every worker keeps the configuration in force (a quiet
        stretch), without waiting for the servers' message (a retry waits)."""
        for _ in range(MAX_APPLY_TRIES):
            try:
                active = self.hooked.put_in_force(config, background)
            except ConfigError as exc:
                config, background = self._rejected(config, exc, retrying), False
                continue
            except RuntimeFault as exc:
                config, background = self._fault(exc, config, retrying), False
                continue
            # the runtime's configuration, as a point of this session's space
            self.config = {k: active[k] for k in self.space.names}
            return
        raise RuntimeFault(f"no configuration could be applied: {MAX_APPLY_TRIES} in a row "
                           "failed")

    def lose_servers(self, exc: ServerLost) -> None:
        """Servers stopped; the runtime already dropped them. Shrink the space to what is
        left; the leader reports, records, and starts the tuning over at the next step."""
        if self._servers_dropped:
            return
        self._servers_dropped = True
        self.space_of_job()
        if self.schedule is not None:
            self.schedule.servers_lost(self.space, exc.servers, str(exc), self.config)

    def _fault(self, exc: RuntimeFault, config: Config | None,
               retrying: bool) -> Config | None:
        """A :class:`RuntimeFault` while putting ``config`` in force: what to try instead;
        raises what it cannot survive."""
        if not exc.recoverable:
            raise exc
        if isinstance(exc, ServerLost):
            # lost at an iteration boundary: nothing to average again; keep the
            # configuration if it can still run, the tuner starts over next step
            self.lose_servers(exc)
            if self.schedule is not None and config is not None \
                    and not self.schedule.allowed(config):
                config = self.schedule.fallback()
            return config
        return self._rejected(config, exc, retrying)

    def _rejected(self, config: Config | None, exc: Exception,
                  retrying: bool) -> Config | None:
        """``config`` could not run: the leader's schedule says what instead."""
        if self.schedule is None:
            return config
        return self.schedule.rejected(config, str(exc), retrying)
