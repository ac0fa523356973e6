"""Offline tuning (``autotune tune``): tune before the real job, so it starts warm.

* :mod:`autotune.workload` (not in this package; the demo, the benchmarks and
  ``autotune selftest`` use it too): a model's real gradients with emulated compute
  (:class:`~autotune.workload.SyntheticJob`) and the DDP reference (``time_ddp``).
* :mod:`autotune.offline.worker`: the rank program that runs it inside
  :func:`autotune.session` (or under DDP, the reference).
* :mod:`autotune.offline.local`: the driver on local processes or the emulated cluster.
* :mod:`autotune.offline.simulated`: the same Tuner against the cluster simulator.
* :mod:`autotune.offline.command`: the ``autotune tune`` command.

See ``docs/tune.md``. Importing this package does not import torch.
"""
