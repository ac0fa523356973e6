"""The trial schedule: what each training iteration of a job runs, and nothing of torch.

The session (:mod:`autotune.sessions`) asks the schedule on every measured iteration; the
schedule asks the Tuner (:mod:`autotune.tuning`) for trials and tells it their scores.

- :mod:`~autotune.schedule.schedule`: ``TrialSchedule``, which phase runs when, the parts
  the phases share, the events from outside (the start-over after a server loss);
- the phases, functions with one interface (:mod:`~autotune.schedule.phase`):
  :mod:`~autotune.schedule.opening` (warm-up, waiting, baseline, loading: to the first
  trial), the trials and the pause (in ``schedule``), :mod:`~autotune.schedule.locked`
  (the loss test, locked, re-tunes);
- the parts, each the one owner of its state: :mod:`~autotune.schedule.warmup` (the
  warm-up and the flow-cap probe), :mod:`~autotune.schedule.trial_phase` (the current
  Tuner's trials), :mod:`~autotune.schedule.codec_wait` (codecs wait out the sensitive
  phase), :mod:`~autotune.schedule.loss_test` (a codec is kept only where the job's loss
  falls sooner), :mod:`~autotune.schedule.kept` (the kept configuration and its watches)
  and :mod:`~autotune.schedule.drift` (the drift watch);
- :mod:`~autotune.schedule.stakes`: what the job can win and what the search costs it;
- :mod:`~autotune.schedule.ledger`: the job's one history of trials and the one writer to
  the store;
- :mod:`~autotune.schedule.listener`: what a person is told.
"""
