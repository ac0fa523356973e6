"""An analytic cost model of a data-parallel cluster, for offline tuning at any scale.

``simulate(job, cluster, config)`` predicts one training iteration (step time,
communication time, exposed communication, bytes per NIC, a breakdown) for a runtime
configuration of :mod:`autotune.tuning.space` on a described :class:`ClusterSpec`;
:class:`SimulatedObjective` makes that a noisy throughput objective for the Tuner. The
model is in :mod:`autotune.sim.model`; the BytePS paper's (OSDI 2020) closed forms in
:mod:`autotune.sim.formulas`; codec costs (calibrated by timing the real codecs) in
:mod:`autotune.sim.codecs`. Nothing here imports torch except :meth:`Job.from_model` and
:func:`calibrate_codecs`.

Limits (what the model does not know; see ``docs/simulator.md``):

- Full bisection bandwidth: no oversubscribed core, no congestion control, no incast
  loss; links are full duplex and fair; every machine has ONE NIC (a probe graph with
  several NICs uses the first, or ``ClusterSpec.nic``).
- Steady-state fluid pipeline: a chunk occupies the cluster's bottleneck resource for
  its bytes at the bottleneck rate; transients inside a chunk (TCP slow start, gloo's
  internal slicing) are folded into the per-message latency. The bottleneck is that of
  the busiest machine; stragglers, jitter and OS noise are not modelled (the objective
  adds Gaussian noise instead).
- The runtime's all-reduce is a ring only, so latency grows as 2(E-1) steps with E
  ring endpoints. What NCCL would do instead (ring or double binary tree, LL/LL128/Simple,
  chosen per message size by NCCL's cost model) is the separate baseline
  :mod:`autotune.sim.nccl` (:func:`ddp_nccl`: DDP's 25 MiB buckets over it), checked
  against the BytePS paper's all-reduce figures (``tests/sim/test_nccl_baseline.py``).
- Per-flow caps apply to the flows leaving a worker machine (streams x local endpoints);
  receivers with many senders are assumed uncapped.
- Compute is a constant per iteration; backward produces gradient bytes at a uniform
  rate; communication does not slow compute (no contention for GPU SMs, memory or PCIe
  with the training itself) and the next forward waits for all gradients (no
  cross-iteration overlap).
- Intra-machine paths: PCIe tree (GPU link, switch uplink) plus NVLink pairs or NVSwitch
  ports; QPI/UPI between sockets and host memory bandwidth on GPU machines are not
  limits. Summation Services have a fixed summing rate per process (one process per
  machine).
- Chunks, streams and Summation Service owners are the runtime's own plan
  (:meth:`Job.plan`, :mod:`autotune.runtime.data.plan`). Push/pull follows the runtime's
  pipeline (``pipeline_depth`` pushes per stream on their way out, store-and-forward
  Summation Services; in a send window an owner's link is shared evenly across streams
  and FIFO within a stream, FIFO across windows; it carries only the traffic the owner
  sums); calibrated on one small emulated cluster only (3 workers + 1 server: held-out
  mean error 6.5%, max 9.2%, predicted too fast; all-reduce 4.0%, max 9.1%; see
  "Calibration" in ``docs/simulator.md``), not on GPU clusters.
- Codec costs are per-process throughputs measured on this machine's CPU
  (:func:`calibrate_codecs`) or defaults; lossy codecs' effect on convergence is not
  modelled, only their speed.
"""

from .cluster import GBIT, ClusterSpec, ClusterError, MachineModel
from .codecs import DEFAULT_CODECS, CodecCost, calibrate_codecs, codec_table, reset_calibration
from .formulas import allreduce_time, byteps_shares, byteps_time
from .job import Job
from .model import DEFAULT_CONFIG, IterationEstimate, simulate
from .nccl import ddp_nccl, nccl_allreduce, nccl_allreduce_time
from .objective import SimulatedObjective

__all__ = [
    "GBIT", "ClusterSpec", "ClusterError", "MachineModel", "CodecCost", "DEFAULT_CODECS",
    "calibrate_codecs", "codec_table", "reset_calibration", "allreduce_time",
    "byteps_shares", "byteps_time", "Job", "DEFAULT_CONFIG", "IterationEstimate",
    "simulate", "SimulatedObjective", "ddp_nccl", "nccl_allreduce", "nccl_allreduce_time",
]
