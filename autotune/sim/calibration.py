"""The simulator's physical constants for one job's machines: measured, fitted, remembered.

The cost model (:func:`autotune.sim.simulate`) has a handful of constants it cannot
derive from the job: what a message costs, how fast a Summation Service sums, how fast
a codec encodes on this device, how fast a local copy runs, the link rates. Assumed,
they make a prior that ranks configurations wrongly (``docs/simulator.md``); so a
:class:`Calibration` holds them as *measured* or *fitted* values, each with where it
came from:

* :func:`measure_host` times what one process can time alone, in a bounded share of a
  second: the summation rate, the copy rate (host memory; device to host on a GPU) and
  each allowed codec's encode and decode rate at the job's chunk size on the job's
  device (``"measured"``). The link rates come from the session's warm-up
  (``"warm-up"``, :func:`autotune.sim.predict.warmup_link`).
* :func:`fit` fits the constants to measured iterations: the maximum a posteriori
  estimate in log time (least squares on ``log(simulated step) - log(measured step)``,
  plus a penalty that holds each constant near its starting value, tighter for measured
  ones; bounds keep every constant physical). Whatever the trials do not inform stays
  where it was.
* The store keeps a job's final calibration under its cluster's key
  (:meth:`autotune.store.Store.save_calibration`); the next job on alike machines starts
  from it (``"stored"``).

Nothing here imports torch except :func:`measure_host`.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from autotune.errors import AutotuneError

from .cluster import ClusterSpec
from .codecs import codec_table
from .job import Job

#: constants a calibration may set: ClusterSpec fields, the job's ``compute_s`` and
#: ``codec_scale`` (a factor on every codec's encode and decode rate)
CONSTANTS = ("nic_gbps", "per_flow_gbps", "latency_us", "chunk_overhead_us",
             "iteration_overhead_us", "codec_call_us", "cpu_sum_gbps", "intra_gbps",
             "pcie_gbps", "stream_overhead", "compute_s", "codec_scale")

#: (lower, upper) of each constant in a fit
BOUNDS: dict[str, tuple[float, float]] = {
    "nic_gbps": (0.005, 800.0), "per_flow_gbps": (0.005, 800.0),
    "latency_us": (1.0, 20000.0), "chunk_overhead_us": (0.5, 20000.0),
    "iteration_overhead_us": (1.0, 1e7), "codec_call_us": (1.0, 1e6),
    "cpu_sum_gbps": (0.1, 2000.0), "intra_gbps": (0.1, 4000.0), "pcie_gbps": (1.0, 4000.0),
    "stream_overhead": (1e-3, 1.0), "compute_s": (1e-5, 100.0), "codec_scale": (0.01, 100.0),
}

#: how far (a factor, one standard deviation in log) a fit may move a constant, by its
#: source: a measured value is trusted, a default is a guess
SPREAD = {"measured": 0.5, "warm-up": 1.0, "stored": 0.5, "fitted": 0.5, "default": 1.5}

#: the constants a fit moves (the others are measured well enough alone, or not
#: identifiable from step times)
FITTED = ("nic_gbps", "per_flow_gbps", "latency_us", "chunk_overhead_us",
          "iteration_overhead_us", "codec_call_us", "cpu_sum_gbps", "intra_gbps",
          "stream_overhead", "compute_s", "codec_scale")

#: floats of the chunk a codec's fixed cost per call is timed on
CALL_FLOATS = 256

#: the least bytes a host rate is timed on (smaller chunks time the call, not the bytes;
#: a call's cost is ``chunk_overhead_us``)
HOST_BYTES = 1 << 20

#: most residual evaluations (each simulates every observation) one fit may spend
FIT_EVALUATIONS = 400
#: most simulation one fit may spend, in the simulator's machine-independent work units
#: (:data:`autotune.sim.model.WORK_PER_CHUNK`; about 0.5 s of CPU on the 2-core machine),
#: so that a fit ends at the same point on every run
FIT_WORK = 5000.0
#: most observations one fit reads (each residual simulates every one)
FIT_OBSERVATIONS = 32


class _OutOfTime(Exception):
    """A fit's budget is spent."""


class CalibrationError(AutotuneError, ValueError):
    """A calibration with an unknown constant or a value out of range."""


@dataclass(frozen=True)
class Calibration:
    """Constants (:data:`CONSTANTS`), codec rates (``{codec: {"encode_gbps",
    "decode_gbps"}}``, Gbit/s of float32 input) and each one's source (``"measured"``,
    ``"warm-up"``, ``"fitted"``, ``"stored"``; a constant with no entry is the
    simulator's default)."""

    constants: Mapping[str, float] = field(default_factory=dict)
    codecs: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, value in self.constants.items():
            if name not in CONSTANTS:
                raise CalibrationError(f"unknown constant {name!r}; known: {', '.join(CONSTANTS)}")
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise CalibrationError(f"constant {name!r} must be a number > 0, got {value!r}")
        for codec, rates in self.codecs.items():
            for key, value in rates.items():
                if key not in ("encode_gbps", "decode_gbps") or not (
                        isinstance(value, (int, float)) and value > 0):
                    raise CalibrationError(f"codec {codec!r}: bad rate {key}={value!r}")

    def source(self, name: str) -> str:
        return self.sources.get(name, "default")

    def updated(self, constants: Mapping[str, float] | None = None,
                codecs: Mapping[str, Mapping[str, float]] | None = None,
                source: str = "measured") -> "Calibration":
        """This calibration with ``constants`` and ``codecs`` replaced, marked ``source``."""
        constants, codecs = dict(constants or {}), dict(codecs or {})
        sources = dict(self.sources)
        sources.update({k: source for k in constants})
        sources.update({f"codec:{c}": source for c in codecs})
        return Calibration({**self.constants, **constants},
                           {**self.codecs, **{c: dict(r) for c, r in codecs.items()}}, sources)

    def restamped(self, source: str) -> "Calibration":
        """The same values, every one marked ``source`` (a stored calibration read back)."""
        return Calibration(dict(self.constants), {c: dict(r) for c, r in self.codecs.items()},
                           {k: source for k in self.sources})

    # ------------------------------------------------------------------ applying
    def apply(self, job: Job, cluster: ClusterSpec) -> tuple[Job, ClusterSpec]:
        """``job`` and ``cluster`` with these constants in force (the job's plan cache is
        kept: no constant changes the chunks)."""
        c = dict(self.constants)
        compute = c.pop("compute_s", None)
        scale = c.pop("codec_scale", 1.0)
        base = codec_table(cluster.codecs)
        codecs = {name: dict(over) for name, over in (cluster.codecs or {}).items()}
        for name, cost in base.items():
            if name == "none":
                continue
            rates = dict(self.codecs.get(name, {}))
            enc = rates.get("encode_gbps", cost.encode_gbps)
            dec = rates.get("decode_gbps", cost.decode_gbps)
            if (name in self.codecs or scale != 1.0) and math.isfinite(enc) and math.isfinite(dec):
                codecs[name] = {**codecs.get(name, {}), "encode_gbps": enc * scale,
                                "decode_gbps": dec * scale}
        cluster = replace(cluster, **c, codecs=codecs or cluster.codecs)
        if compute is not None and compute != job.compute_s:
            cache = job._cache
            job = replace(job, compute_s=compute)
            object.__setattr__(job, "_cache", cache)
        return job, cluster

    # ------------------------------------------------------------------ storing
    def to_json(self) -> str:
        return json.dumps({"constants": dict(self.constants),
                           "codecs": {c: dict(r) for c, r in self.codecs.items()},
                           "sources": dict(self.sources)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | Mapping[str, Any]) -> "Calibration":
        data = json.loads(text) if isinstance(text, str) else dict(text)
        if not isinstance(data, Mapping):
            raise CalibrationError("a calibration is a JSON object")
        return cls({k: float(v) for k, v in data.get("constants", {}).items()},
                   {c: {k: float(v) for k, v in r.items()}
                    for c, r in data.get("codecs", {}).items()},
                   dict(data.get("sources", {})))

    def describe(self) -> list[tuple[str, str, str]]:
        """``(name, value, source)`` rows, for ``autotune db calibrations``."""
        rows = [(k, f"{v:.4g}", self.source(k)) for k, v in sorted(self.constants.items())]
        for codec, rates in sorted(self.codecs.items()):
            shown = ", ".join(f"{k.split('_')[0]} {v:.3g}" for k, v in sorted(rates.items()))
            rows.append((f"codec {codec} (Gbit/s)", shown, self.source(f"codec:{codec}")))
        return rows


def starting_values(job: Job, cluster: ClusterSpec, calibration: Calibration) -> dict[str, float]:
    """Every fittable constant's value as the simulator would use it now."""
    values = {k: float(getattr(cluster, k)) for k in CONSTANTS
              if hasattr(cluster, k) and getattr(cluster, k) is not None}
    values["compute_s"] = job.compute_s
    values["codec_scale"] = 1.0
    values.update(calibration.constants)
    return values


# ---------------------------------------------------------------------- measuring
def measure_host(*, chunk_bytes: int, codecs: Iterable[str] = (), device: Any = "cpu",
                 seconds: float = 0.25) -> Calibration:
    """Time, on this process, what the simulator would otherwise assume (module
    docstring): the summation rate (``cpu_sum_gbps``: adding one chunk into another on
    the host), the copy rate (``intra_gbps`` on a CPU job, ``pcie_gbps`` from a CUDA
    device to host memory) and each codec in ``codecs`` at ``chunk_bytes`` (at least
    :data:`HOST_BYTES`) on ``device``, with what a codec costs a chunk beyond its bytes
    (``codec_call_us``: encoding and decoding a 1 KiB chunk, the median over ``codecs``),
    on one CPU thread. Each rate is the best of a few
    repeats; the whole takes about ``seconds`` (more only if one repeat of a codec is
    slower than its share)."""
    import torch

    device = torch.device(device)
    numel = max(HOST_BYTES, int(chunk_bytes)) // 4
    names = [c for c in codecs if c != "none"]
    share = seconds / (2 + len(names))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a rate per core: steady on a busy machine
    try:
        return _measure(torch, device, numel, names, share)
    finally:
        torch.set_num_threads(threads)


def _measure(torch: Any, device: Any, numel: int, names: list[str], share: float) -> Calibration:
    from .codecs import time_codec

    def best(fn: Any, sync: bool = False) -> float:
        times: list[float] = []
        start = time.perf_counter()
        while len(times) < 3 or (time.perf_counter() - start < share and len(times) < 50):
            t0 = time.perf_counter()
            fn()
            if sync:
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - t0)
        return max(min(times), 1e-9)

    gbits = numel * 32 / 1e9
    a, b = torch.ones(numel), torch.ones(numel)
    constants = {"cpu_sum_gbps": 2 * gbits / best(lambda: a.add_(b))}
    if device.type == "cuda":
        src = torch.ones(numel, device=device)
        host = torch.empty(numel, pin_memory=True)
        constants["pcie_gbps"] = gbits / best(lambda: host.copy_(src), sync=True)
    else:
        constants["intra_gbps"] = gbits / best(lambda: a.copy_(b))
    rates: dict[str, dict[str, float]] = {}
    calls = []
    for name in names:
        measured = time_codec(name, numel, device=device, seconds=share)
        if measured is not None:
            rates[name] = {"encode_gbps": measured.encode_gbps, "decode_gbps": measured.decode_gbps}
        tiny = time_codec(name, CALL_FLOATS, device=device, repeats=5)
        if tiny is not None:  # a chunk of 1 KiB: the calls, hardly the bytes
            gbits = CALL_FLOATS * 32 / 1e9
            calls.append(1e6 * (gbits / tiny.encode_gbps + gbits / tiny.decode_gbps))
    if calls:
        constants["codec_call_us"] = max(1.0, float(np.median(calls)))
    return Calibration().updated(constants, rates, "measured")


# ---------------------------------------------------------------------- fitting
@dataclass(frozen=True)
class Observation:
    """One measured configuration: its mean step time (s) over ``count`` iterations."""

    config: Mapping[str, Any]
    step_s: float
    count: int = 1


def fit(job: Job, cluster: ClusterSpec, calibration: Calibration,
        observations: Sequence[Observation], *, names: Sequence[str] = FITTED,
        evaluations: int = FIT_EVALUATIONS,
        budget: float = FIT_WORK) -> tuple[Calibration, float]:
    """Fit the constants ``names`` to ``observations`` (module docstring): returns the
    new calibration (the fitted constants marked ``"fitted"``) and the root mean square
    of the log errors it leaves on the observations. Constants the observations do not
    move stay as they were; so does everything when nothing can be simulated. At most
    ``evaluations`` residual vectors and ``budget`` work units of simulation
    (:func:`autotune.sim.model.work`) are spent (then the best point so far is taken)."""
    from scipy.optimize import least_squares

    from .model import simulate, work

    obs = [o for o in observations if o.step_s > 0 and math.isfinite(o.step_s)]
    if len(obs) > FIT_OBSERVATIONS:  # the most measured (the last told among equals)
        order = sorted(range(len(obs)), key=lambda i: (obs[i].count, i), reverse=True)
        obs = [obs[i] for i in sorted(order[:FIT_OBSERVATIONS])]
    start = starting_values(job, cluster, calibration)
    least = min((o.step_s for o in obs), default=0.0)
    if start["compute_s"] <= 0:  # unknown: a guess the fit may move far
        start["compute_s"] = 0.3 * least
    if start.get("iteration_overhead_us", 0.0) <= 0:
        start["iteration_overhead_us"] = 0.1 * least * 1e6
    if start.get("codec_call_us", 0.0) <= 0:
        start["codec_call_us"] = 100.0  # a Python call or two
    start.setdefault("per_flow_gbps", start["nic_gbps"])  # no cap: one flow fills the NIC
    active = [n for n in names if n in start and _informed(n, job, cluster, obs)]
    if not obs or not active:
        return calibration, math.nan
    lo = np.log([BOUNDS[n][0] for n in active])
    hi = np.log([BOUNDS[n][1] for n in active])
    x0 = np.clip(np.log([start[n] for n in active]), lo + 1e-9, hi - 1e-9)
    sigma = np.array([SPREAD.get(calibration.source(n), SPREAD["default"]) for n in active])
    weight = np.sqrt(np.array([max(1, o.count) for o in obs], dtype=float))
    target = np.log([o.step_s for o in obs])
    spent = [0.0]  # work units

    def steps(x: np.ndarray) -> np.ndarray:
        values = dict(zip(active, np.exp(x)))
        j, c = Calibration(values).apply(job, cluster)
        out = np.empty(len(obs))
        for i, o in enumerate(obs):
            try:
                estimate = simulate(j, c, o.config)
                out[i] = estimate.step_s
            except AutotuneError:
                estimate, out[i] = None, math.nan
            spent[0] += work(estimate)
        return out

    best: list = [math.inf, x0, None]  # cost, point, its simulated steps

    def bounded(x: np.ndarray) -> np.ndarray:  # residuals, remembering the best point
        if spent[0] > budget and best[2] is not None:
            raise _OutOfTime
        s = steps(x)
        r = np.concatenate([weight * np.where(np.isfinite(s) & (s > 0),
                                              np.log(np.maximum(s, 1e-12)) - target, 0.0),
                            (x - x0) / sigma])
        cost = float(r @ r)
        if cost < best[0] or best[2] is None:
            best[0], best[1], best[2] = cost, np.array(x), s
        return r

    bounded(x0)
    if not np.isfinite(best[2]).any():  # nothing can be simulated
        return calibration, math.nan
    try:
        least_squares(bounded, x0, bounds=(lo, hi), method="trf", diff_step=0.02,
                      max_nfev=max(1, evaluations // (len(active) + 1)), x_scale=1.0)
    except _OutOfTime:  # a large plan or many observations: the best point so far
        pass
    x, s = best[1], best[2]
    fitted = dict(zip(active, (float(v) for v in np.exp(x))))
    ok = np.isfinite(s) & (s > 0)
    rms = float(np.sqrt(np.mean((np.log(s[ok]) - target[ok]) ** 2))) if ok.any() else math.nan
    return calibration.updated(fitted, source="fitted"), rms


def _informed(name: str, job: Job, cluster: ClusterSpec, obs: Sequence[Observation]) -> bool:
    """Whether ``observations`` can say anything of constant ``name`` on this cluster."""
    multi = cluster.machines > 1
    if name in ("nic_gbps", "latency_us", "stream_overhead"):
        return multi
    if name == "per_flow_gbps":  # a cap the warm-up showed, or one it was too coarse to see
        return multi
    if name == "intra_gbps":
        return cluster.workers_per_machine > 1 and cluster.worker_device == "cpu"
    if name == "cpu_sum_gbps":
        return any(o.config.get("transport") == "pushpull" for o in obs) or (
            cluster.worker_device == "cpu" and cluster.workers_per_machine > 1)
    if name in ("codec_scale", "codec_call_us"):
        return any(o.config.get("compression", "none") != "none" for o in obs)
    return True
