"""What a session measures of its machines for the tuner's model, and what it remembers.

At the start every worker times the link together (:func:`measure_link`: a small and a
larger all-reduce SUM over the workers, through the session's own per-iteration
collective); the leader then times what one process can time alone
(:func:`autotune.sim.calibration.measure_host`), starts from the calibration stored for
alike machines (:mod:`autotune.store.calibrations`) and, at the end, stores the
constants its prior fitted to the trials. Together this takes well under a second on
the links autotune is tested on (``docs/tuner.md``, "The model").
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Callable, Mapping

import torch

from autotune.sim.calibration import Calibration

#: bytes of the larger all-reduce of :func:`measure_link`, whatever the model's size (a
#: smaller payload on a fast link would leave the difference within the timing noise)
LINK_BYTES = 1 << 20
SMALL_FLOATS = 64   # the small all-reduce: its time is the per-message cost
REPEATS = 3


def measure_link(reduce: Callable[[torch.Tensor], None], *, workers: int) -> dict[str, float]:
    """Collective over the workers: time a small and a larger all-reduce through
    ``reduce`` (SUM in place, over the ``workers``), the best of :data:`REPEATS` each.
    Returned: ``latency_us``, the cost of one message (a ring takes ``2(W-1)`` steps)
    and ``link_gbps``, the rate one flow reaches (bytes through a NIC, ``2(W-1)/W`` of
    the payload, over the larger one's extra time); ``{}`` with one worker."""
    if workers < 2:
        return {}
    nbytes = LINK_BYTES

    def best(t: torch.Tensor) -> float:
        times = []
        for _ in range(REPEATS):
            t0 = time.perf_counter()
            reduce(t)
            times.append(time.perf_counter() - t0)
        return min(times)

    small = best(torch.zeros(SMALL_FLOATS, dtype=torch.float32))
    big = best(torch.zeros(nbytes // 4, dtype=torch.float32))
    steps = 2 * (workers - 1)
    wire = 8 * steps / workers * (nbytes - 4 * SMALL_FLOATS)
    return {"latency_us": max(1.0, 1e6 * small / steps),
            "link_gbps": min(800.0, max(0.005, wire / max(big - small, 1e-9) / 1e9))}


def link_calibration(measured: Mapping[str, float], warmup: Mapping[str, float]) -> Calibration:
    """The link constants of the prior: from :func:`measure_link` where it ran
    (``measured``), with the per-flow cap the warm-up showed (``warmup``,
    :func:`autotune.sim.predict.warmup_link`); from the warm-up alone otherwise (then
    every rate is a lower bound: the warm-up's iterations include the compute)."""
    if not measured:
        return Calibration().updated(warmup, source="warm-up")
    rate = measured["link_gbps"]
    out = Calibration().updated({"latency_us": measured["latency_us"]}, source="measured")
    if "per_flow_gbps" in warmup:  # several flows were faster: one flow is capped
        speedup = warmup["nic_gbps"] / max(warmup["per_flow_gbps"], 1e-9)
        out = out.updated({"per_flow_gbps": rate}, source="measured")
        return out.updated({"nic_gbps": rate * speedup}, source="warm-up")
    return out.updated({"nic_gbps": max(rate, warmup.get("nic_gbps", 0.0))}, source="measured")


def host_calibration(space: Any, *, gradient_bytes: int, device: Any) -> Calibration:
    """:func:`autotune.sim.calibration.measure_host` for a job: the codecs ``space``
    allows, at the default chunk size (or the whole gradient, if smaller), on ``device``;
    an empty calibration (with a warning) if it fails: measuring is advisory."""
    from autotune.sim.calibration import measure_host

    codecs = ([v for v in space["compression"].values if v != "none"]
              if "compression" in space.names else [])
    try:
        return measure_host(chunk_bytes=min(4 << 20, max(1024, int(gradient_bytes))),
                            codecs=codecs, device=device)
    except Exception as exc:  # never stop training for a measurement
        warnings.warn(f"could not time this machine for the tuner's model ({exc}); "
                      "using the simulator's defaults", RuntimeWarning, stacklevel=2)
        return Calibration()


def merged(*layers: Calibration) -> Calibration:
    """The calibrations in order, each later one overriding the earlier ones' values."""
    out = Calibration()
    for layer in layers:
        out = Calibration({**out.constants, **layer.constants},
                          {**out.codecs, **layer.codecs}, {**out.sources, **layer.sources})
    return out
