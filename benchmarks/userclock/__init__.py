"""The user's clock against DDP: the cases of ``benchmarks/clock_bench.py`` (issue 60).

One script asks one question, autotune against plain DDP on the emulated cluster, in six
cases (``job``, ``accuracy``, ``iteration``, ``tuning``, ``retune``, ``hook``); what they
share has one home here:

* :mod:`.tasks`: the training jobs (a small GPT, a CNN on digits, a tiny MLP, a model of
  emulated compute with a zoo model's gradients);
* :mod:`.rank`: the one rank program: a list of *arms* (DDP, ``autotune.session(model)``,
  ``autotune.session(ddp_model)``, a configuration fixed through the runtime) trained one
  after another in one world, every step timed the same way;
* :mod:`.common`: the driver's pieces: launching arms on the cluster, interleaved runs,
  medians with their spread, the speed-up over DDP;
* one module per case: what it runs and how it reports.
"""
