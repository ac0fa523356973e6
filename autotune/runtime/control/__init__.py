"""The runtime's control plane: who is who, joining the job, the groups, and agreeing on
a configuration at an iteration boundary.

- :mod:`~autotune.runtime.control.world`: every rank's role (worker or server) and machine;
- :mod:`~autotune.runtime.control.bootstrap`: the collective that starts every rank's runtime;
- :mod:`~autotune.runtime.control.control`: the control plane's groups and bounded waits;
- :mod:`~autotune.runtime.control.groups`: the streams' process groups, made once each;
- :mod:`~autotune.runtime.control.sync`: the collective ``sync`` at an iteration boundary;
- :mod:`~autotune.runtime.control.reconfigure`: what each rank does around the vote on a
  new configuration, and :mod:`~autotune.runtime.control.prepared`, a configuration
  prepared for one rank;
- :mod:`~autotune.runtime.control.rounds`, :mod:`~autotune.runtime.control.blame` and
  :mod:`~autotune.runtime.control.faults`: the averaging rounds as the protocol sees them,
  which rank a failure is blamed on, and fault injection for tests.
"""
