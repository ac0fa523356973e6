"""Imported first by the test processes that run tuning sessions: the Tuner's libraries
(the GPs of the prior and of the Bayesian searcher), already imported as in a process
that used them before.

A session's first trial waits while those libraries are imported in the background
(:mod:`autotune.tuning.preload`: a trial timed beside the import would be slower than its
configuration makes it). A test job's iterations take milliseconds, so that wait would
take the whole job, and which iterations are trials would depend on the machine's speed.
Imported here, nothing waits; ``tests/schedule/test_schedule.py`` tests the wait itself.
"""

import sklearn.gaussian_process  # noqa: F401
import skopt  # noqa: F401
import skopt.learning  # noqa: F401
