"""The runtime's data plane: the gradient bytes from ``.grad`` to the wire and back.

- :mod:`~autotune.runtime.data.layout` and :mod:`~autotune.runtime.data.plan`: which
  gradients a worker averages, in which order, and which bytes travel together, on which
  stream, to which owner (the plan the simulator uses too);
- :mod:`~autotune.runtime.data.averager`: one rank's averaging, gradients in, averages back;
- :mod:`~autotune.runtime.data.communication` and :mod:`~autotune.runtime.data.summation`:
  the Communication Service (a worker's side) and the Summation Service (a server's);
- :mod:`~autotune.runtime.data.engine`: the stream threads, chunk readiness, bounded waits;
- :mod:`~autotune.runtime.data.copies` and :mod:`~autotune.runtime.data.staging`: the
  gradient copies, and GPU staging through pinned host buffers;
- :mod:`~autotune.runtime.data.compression`: which chunks a configuration compresses, with
  the codecs of :mod:`autotune.runtime.codecs`;
- :mod:`~autotune.runtime.data.gradstats` and :mod:`~autotune.runtime.data.trace`: a
  worker's gradient in a few numbers (goodput), and a timeline for diagnosis.
"""
