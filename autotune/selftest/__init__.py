"""``autotune selftest``: check and time the runtime on the machines at hand.

    autotune selftest [--workers 2 --servers 1]          # this machine: starts the ranks
    autotune launch -n 2 -k 1 $(which autotune) selftest  # the same, through the launcher
    torchrun ... -m autotune.selftest [options]           # a cluster (servers: -m autotune.server)

Every worker registers a set of parameters of ``--tensors`` shapes (``--size`` MiB of
gradients in all, of ``--dtypes``) with :class:`autotune.runtime.Runtime` and sweeps a set
of configurations (:func:`autotune.selftest.sweep.sweep`): transports (push/pull when the
job has servers, and with the workers' own Summation Services), streams, chunk sizes,
intra-machine modes where a machine has several workers, and with ``--lossy`` every codec.
For each configuration:

* **check** — gradients are made by a real backward pass (``loss = sum(p * t)``, so
  ``p.grad == t``, different on every worker); what ``rt.wait()`` leaves in ``.grad`` is
  compared with ``torch.distributed.all_reduce`` (SUM over the workers' group, then ``/= n``)
  of the same gradients, one flat tensor per dtype. Lossless: ``exact`` when bit for bit
  equal (``torch.equal``), else ``close`` when every element is within the worst-case bound
  of two float summations in different orders (:mod:`autotune.selftest.bounds`; only
  possible with 3 or more workers or half-precision gradients), else ``FAILED``. Lossy: on
  the first iteration, error feedback cleared beforehand, within the codec's bound, else
  ``FAILED``. Lossless configurations are checked on every timed iteration too.
* **time** — the median over ``--iterations`` of the slowest worker's ``sync`` + forward +
  backward + ``wait`` (the first iteration of a configuration, which pays for the switch,
  is not timed), against the same iteration under
  ``torch.nn.parallel.DistributedDataParallel`` on parameters of the same shapes (gloo,
  25 MiB buckets, backward until DDP has averaged; :func:`autotune.workload.time_ddp`):
  ``vs DDP`` = DDP's median / this median (above 1: faster than DDP). ``dist.all_reduce``
  of the flat gradients alone is shown too (pure communication, one call per dtype).

A configuration that fails (rejected, a fault, a check outside its bound) is reported as
``FAILED`` with its error and the sweep goes on; one that breaks the runtime (a dead or
stuck peer) ends the sweep, the rest marked ``SKIPPED``. The leader prints a table and
writes ``--json``, and exits 1 if any configuration failed (the other ranks exit 0); an
option or environment it cannot run with is a :class:`SelftestError`, one line, exit 2.

``--ddp``: the same checks and times for autotune inside real
``torch.nn.parallel.DistributedDataParallel``, as DDP's comm hook
(:class:`autotune.runtime.ddp.ddp_hook.CommHookState`), against plain DDP on the same
iterations (:mod:`autotune.selftest.rank_ddp`): every rank a worker, the hook's space
(streams x chunk sizes, all-reduce; codecs with ``--lossy``).

Devices: CPU, or CUDA gradients (``--device cuda``: ``cuda:LOCAL_RANK % device_count``,
so ranks beyond the GPUs share them; under ``--ddp`` DDP's group is then gloo, NCCL
refusing two ranks on one device). The native runtime stages CUDA gradients through
pinned host buffers on a side CUDA stream, and its communication is gloo. The output says
so; see docs/gpu.md for what has and has not run on GPUs (no CUDA path of this package
has yet).

The modules, in the order a run uses them:

* :mod:`~autotune.selftest.command`: the ``autotune selftest`` click command (options,
  starting the job outside one) and ``python -m autotune.selftest``;
* :mod:`~autotune.selftest.sweep`: which configurations are checked, and the gradients'
  shapes;
* :mod:`~autotune.selftest.rank`: the program each rank runs (servers serve, workers check
  and time every configuration, then DDP and ``all_reduce``), and what ``--ddp`` shares;
* :mod:`~autotune.selftest.rank_ddp`: each rank's program under ``--ddp``;
* :mod:`~autotune.selftest.bounds`: how far a correct average may differ from
  ``all_reduce``'s;
* :mod:`~autotune.selftest.table`: the leader's table.

Importing this package imports neither torch nor click.
"""

from __future__ import annotations

from autotune.errors import AutotuneError

__all__ = ["SelftestError"]


class SelftestError(AutotuneError, ValueError):
    """A selftest that cannot start: a bad option, or one this machine cannot honour
    (``--device cuda`` without CUDA). The command prints it as one line and exits 2."""
