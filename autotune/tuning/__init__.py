"""The tuner: the search that chooses the runtime's configuration, and nothing of torch.

- :mod:`~autotune.tuning.space`: the tunable parameters, their domains, pins and encoding
  (``SearchSpace``), built from the runtime's limits and its table of knobs
  (:data:`autotune.runtime.config.KNOBS`);
- :mod:`~autotune.tuning.tuner`: the ensemble under the bandit with a budget (``Tuner``,
  ``ask``/``tell``) and its settings groups;
- :mod:`~autotune.tuning.trial`: ``Trial``, the one record of a trial from its ask to its
  end (asked, running, scored, cut, failed), and the cut-short rule;
- :mod:`~autotune.tuning.noise`: the noise model (each configuration's log mean and
  standard error, the lower bound that picks the kept one);
- :mod:`~autotune.tuning.confirm`: the confirm phase (a race of the leader, the reference
  and the challengers; one worse with confidence is dropped);
- :mod:`~autotune.tuning.screen`: which nominee runs (the prior's screen, the shared judge);
- :mod:`~autotune.tuning.bandit`: the sliding-window AUC bandit (AIACC-Training, ICDCS 2022);
- :mod:`~autotune.tuning.search`: the searchers (grid, PBT, Bayesian, Hyperband, random,
  structured);
- :mod:`~autotune.tuning.prior`: the physics prior calibrated online (``Surrogate``);
- :mod:`~autotune.tuning.efficiency`: the gradient noise scale and a codec's statistical
  efficiency (goodput);
- :mod:`~autotune.tuning.lossy`: the goodput guards as functions of values;
- :mod:`~autotune.tuning.preload`: the GPs' libraries imported in the background.

The session's trial schedule, which runs the Tuner's trials in a training job, is the
package :mod:`autotune.schedule`.

Data flows one way: the session feeds measurements in, configurations come out.
"""
