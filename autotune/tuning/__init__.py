"""The tuner: everything that chooses the runtime's configuration, and nothing of torch.

- :mod:`~autotune.tuning.space`: the tunable parameters, their domains, pins and encoding
  (``SearchSpace``), built from the runtime's limits;
- :mod:`~autotune.tuning.tuner`: the ensemble under the bandit with a budget (``Tuner``,
  ``ask``/``tell``);
- :mod:`~autotune.tuning.bandit`: the sliding-window AUC bandit (AIACC-Training, ICDCS 2022);
- :mod:`~autotune.tuning.search`: the searchers (grid, PBT, Bayesian, Hyperband, random);
- :mod:`~autotune.tuning.prior`: the physics prior calibrated online (``Surrogate``);
- :mod:`~autotune.tuning.trials`: the trial driver (ask, measure, tell, record) and the
  one trial record type (``TrialRecord``);
- :mod:`~autotune.tuning.schedule`: what each training iteration runs (``TrialSchedule``:
  warm-up, trials, cut-short, lock, drift, start-over), for the session and the DDP hook.

Data flows one way: the session feeds measurements in, configurations come out.
"""
