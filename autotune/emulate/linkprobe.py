"""Measure B, the bytes/s one emulated host achieves to another over torch.distributed.

:func:`measure_bandwidth` runs :mod:`autotune.emulate.probe_job` as a 2-rank gloo job on
two hosts of a :class:`~autotune.emulate.cluster.Cluster`. Rank 0 sends ``--bytes`` to rank 1 with
``send``/``recv`` (split over ``--streams`` process groups, one thread each, so the
per-flow cap can be seen), rank 1 acknowledges with one element, and rank 0 times
send-start to ack. With ``--duplex`` rank 1 sends the same amount back at the same time
(what a ring all-reduce does), and the time covers both directions. Rank 0 prints one
line ``LINKPROBE {json}``.

This is the B that the analytic optima of the benchmarks use.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

MARK = "LINKPROBE "  # rank 0 of probe_job prints its result after this


@dataclass
class LinkMeasurement:
    src: int
    dst: int
    nbytes: int
    streams: int
    duplex: bool
    samples_s: list[float]  # seconds per transfer of nbytes (each direction in duplex)
    nominal_bytes_per_s: float  # the emulated NIC rate / 8

    @property
    def bytes_per_s(self) -> float:
        """Median achieved payload bytes/s in one direction."""
        return self.nbytes / statistics.median(self.samples_s)

    @property
    def best_bytes_per_s(self) -> float:
        """Fastest sample's bytes/s: the link's capacity, least disturbed by a busy CPU
        (what the benchmarks use as B, so a slow sample cannot flatter a ratio)."""
        return self.nbytes / min(self.samples_s)

    @property
    def ratio(self) -> float:
        """Achieved / nominal. Payload over TCP/IP/Ethernet is at most 1448/1514 = 0.956."""
        return self.bytes_per_s / self.nominal_bytes_per_s

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(bytes_per_s=self.bytes_per_s, best_bytes_per_s=self.best_bytes_per_s,
                 ratio=self.ratio)
        return d


def measure_bandwidth(cluster, src: int = 0, dst: int = 1, nbytes: int = 8 << 20,
                      repeats: int = 3, streams: int = 1, duplex: bool = False,
                      timeout_s: float = 120.0, echo=None) -> LinkMeasurement:
    """Achieved bytes/s from host ``src`` to host ``dst`` of an up ``cluster``."""
    from autotune.emulate.netns import EmulatorError

    if src == dst:
        raise EmulatorError("src and dst must be different hosts")
    argv = cluster.python("-m", "autotune.emulate.probe_job", "--bytes", str(nbytes),
                          "--repeats", str(repeats), "--streams", str(streams))
    if duplex:
        argv.append("--duplex")
    job = cluster.launch(argv, workers=2, hosts=[src, dst], timeout_s=timeout_s, echo=echo).check()
    res = job.last_json(MARK)
    return LinkMeasurement(src=src, dst=dst, nbytes=res["bytes"], streams=streams, duplex=duplex,
                           samples_s=res["samples_s"],
                           nominal_bytes_per_s=cluster.link.rate_bps / 8.0)
