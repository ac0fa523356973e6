"""The warm-up's flow-cap probe: does one TCP flow run far below the NIC rate?

Across machines the last of two or more warm-up iterations runs the default with
:data:`PROBE_STREAMS` streams (:func:`flow_probe`), so that a per-flow cap (one flow held
far below the NIC rate, as on many cloud NICs) shows: if several streams are much faster
than one, the seed configurations with that many streams are tried first
(:func:`capped_seeds`, AIACC-Training's remedy). The trial schedule
(:mod:`autotune.schedule.schedule`) runs the probe; the session judges the times.
Nothing here imports torch.
"""

from __future__ import annotations

from typing import Callable

from autotune.tuning.space import Config, SearchSpace

#: Streams of the last warm-up iteration (when there are two or more, across machines):
#: enough flows to fill a NIC whose single flow is capped at a quarter of it or more.
PROBE_STREAMS = 4


def flow_probe(space: SearchSpace, gradient_bytes: int | None = None) -> Config | None:
    """The flow-cap probe of a job: the default with :data:`PROBE_STREAMS` streams and,
    when ``gradient_bytes`` (all gradients of an iteration) would fill fewer than that
    many default chunks, chunks small enough for every stream to carry one (else the
    extra streams carry nothing and the probe cannot see a cap: measured, a 1.9 MiB model
    in one 4 MiB chunk ran as fast with 4 streams as with one under a 4x cap).
    ``None`` when the space has no more streams than the default."""
    if "streams" not in space.names:
        return None
    default = space.default()
    streams = space["streams"].nearest(PROBE_STREAMS)
    if streams <= default["streams"]:
        return None
    probe = {**default, "streams": streams}
    if gradient_bytes and "chunk_bytes" in space.names:
        fits = [v for v in space["chunk_bytes"].values if v * streams <= gradient_bytes]
        if fits and max(fits) < default["chunk_bytes"]:
            probe["chunk_bytes"] = max(fits)
        elif not fits:
            probe["chunk_bytes"] = min(space["chunk_bytes"].values)
    return space.project(probe)


def capped_seeds(space: SearchSpace, probe: Config) -> list[Config]:
    """The space's seed configurations (the default, push/pull through every server)
    with the ``probe``'s streams and chunks no larger than its: what to try first when
    the warm-up showed a per-flow cap."""
    seeds = []
    for c in space.seeds():
        seed = {**c, "streams": probe["streams"]}
        if "chunk_bytes" in c:
            seed["chunk_bytes"] = min(c["chunk_bytes"], probe["chunk_bytes"])
        seeds.append(seed)
    return seeds


#: ``capped(times, probe_times)``: whether the warm-up's times (the default's, the
#: several-stream probe's) show a per-flow cap
Capped = Callable[[list, list], bool]


class WarmUp:
    """The warm-up iterations of one schedule: ``iterations`` of the default, the last of
    two or more the flow-cap probe when ``probe`` (across machines). Their times give the
    physics prior its network rate (``times``) and show a per-flow cap (``probe_times``)."""

    def __init__(self, space: SearchSpace, iterations: int, probe: bool,
                 gradient_bytes: int | None) -> None:
        self.left = iterations
        self.times: list[float] = []  # the default's warm-up times (the prior's rate)
        self.probe_times: list[float] = []  # the several-stream probe's
        self.comm: list[float] = []  # the default's exposed communication (the stakes)
        self.probe = flow_probe(space, gradient_bytes) if probe and iterations >= 2 else None

    def ran(self, config: Config, seconds: float, allowed: Callable[[Config], bool],
            comm_s: float | None = None) -> Config | None:
        """A warm-up iteration of ``config`` ran in ``seconds``, ``comm_s`` of them
        waiting for the averaged gradients: the next configuration of the warm-up (the
        probe last, if ``allowed``), or None once it is over."""
        self.left -= 1
        if seconds != float("inf"):
            probing = self.probe is not None and config == self.probe
            (self.probe_times if probing else self.times).append(seconds)
            if comm_s is not None and not probing:
                self.comm.append(comm_s)
        if self.left == 0:
            return None
        if self.left == 1 and self.probe is not None and allowed(self.probe):
            return self.probe
        return config

    def timings(self) -> tuple[list[float], list[float]]:
        """Its times as values: (the default's, the several-stream probe's)."""
        return list(self.times), list(self.probe_times)

    def unscored(self) -> None:
        """A warm-up iteration of a configuration kept without tuning ran: not timed."""
        self.left -= 1

    def seeds(self, space: SearchSpace, capped: Capped | None) -> list[Config]:
        """What to try first: the :func:`capped_seeds` if the probe ran and ``capped(times,
        probe_times)`` says the warm-up showed a per-flow cap, else nothing."""
        if (self.probe is None or not self.probe_times or capped is None
                or not capped(list(self.times), list(self.probe_times))):
            return []
        return capped_seeds(space, self.probe)
