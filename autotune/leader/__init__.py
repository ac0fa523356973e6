"""The leader's part of a session: what the first worker keeps and does for every rank.

Below the way in (:mod:`autotune.sessions`), which calls it and which it never imports:

- :mod:`~autotune.leader.leader`: :class:`~autotune.leader.leader.Leader`, the run in the
  store, the trial schedule and its Tuners, and the run's end;
- :mod:`~autotune.leader.tuners`: the job's space and its Tuners with the physics prior;
- :mod:`~autotune.leader.calibrate`: what a session measures of its machines for that
  prior, and what it remembers;
- :mod:`~autotune.leader.record`: the run in the results store;
- :mod:`~autotune.leader.display`: the progress and the final table;
- :mod:`~autotune.leader.results`: what a session reports (``best``, ``history``), read
  from the leader's schedule and trials.
"""
