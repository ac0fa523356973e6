"""Shared pieces of the emulated-cluster benchmarks (goodput, e2e, tuning).

Driver side: :func:`emulated` checks root and brings a :class:`~autotune.emulate.Cluster`
up, :func:`measure_B` measures the link, :func:`save` writes the JSON next to the PNG,
:func:`machine` records what the numbers were measured on (load included: the machine is
shared). Rank side: :func:`rank_env` reads the launcher's environment, :func:`emit` prints
the ``MARK {json}`` line the driver reads with ``JobResult.last_json``.

Benchmarks run as ``sudo .venv/bin/python benchmarks/<name>.py``; each file is also its
own rank program (``--job``).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

MARK = "BENCH "
RESULTS = Path(__file__).resolve().parent / "results"
MiB = 1 << 20


def machine() -> dict[str, Any]:
    """CPU count, kernel and load when the run ended (the box is shared)."""
    try:
        load = list(os.getloadavg())
    except OSError:
        load = []
    return {"cpus": os.cpu_count(), "kernel": os.uname().release, "loadavg": load,
            "time": time.strftime("%Y-%m-%d %H:%M:%S")}


def require_emulator(prog: str) -> None:
    from autotune.emulate import unavailable_reason

    reason = unavailable_reason()
    if reason:
        sys.exit(f"{prog}: {reason}")


def measure_B(cluster: Any, repeats: int = 3, nbytes: int = 16 * MiB) -> dict[str, Any]:
    """The link, host 0 -> 1, in payload bytes/s.

    ``B`` is the NIC rate: the best sample (a busy CPU only ever slows a sample, so the
    best one is the link's capacity) of one flow, or, when the cluster caps each TCP flow,
    of four times ``NIC / cap`` flows, over three probe jobs (new connections, new ports:
    the emulator tells flows apart by port bits, and flows that collide share a cap).
    ``flow_B`` is one flow's best sample: what a job that opens one connection per peer
    (gloo, so DDP) can reach. The analytic optima use ``B``; the one-flow bound uses
    ``flow_B``. Without a cap both are the same measurement.
    """
    import math

    from autotune.emulate import measure_bandwidth

    one = measure_bandwidth(cluster, 0, 1, nbytes=nbytes, repeats=repeats)
    d = one.to_dict()
    d["flow_B"] = d["B"] = one.best_bytes_per_s
    cap = cluster.link.flow_cap_bps
    if cap:
        flows = 4 * math.ceil(cluster.link.rate_bps / cap)
        nic = max((measure_bandwidth(cluster, 0, 1, nbytes=2 * nbytes, repeats=repeats,
                                     streams=flows) for _ in range(3)),
                  key=lambda m: m.best_bytes_per_s)
        d.update(B=nic.best_bytes_per_s, nic=nic.to_dict(), flow_cap_bps=cap)
    return d


def describe_link(link: dict[str, Any]) -> str:
    """``B = 47.1 MB/s`` and, under a per-flow cap, the one-flow rate too."""
    out = f"B = {link['B'] / 1e6:.2f} MB/s"
    if link.get("nic"):
        out += (f" (NIC, {link['nic']['streams']} flows; one flow {link['flow_B'] / 1e6:.2f} "
                f"MB/s under a cap of {link['flow_cap_bps'] / 8e6:.2f} MB/s)")
    return out


def save(res: dict, json_path: Path) -> None:
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(res, indent=2))


def save_figure(fig: Any, path: Path) -> None:
    """Lay ``fig`` out, write it as a PNG at ``path`` and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def report(res: dict, table: Callable[[dict], None], json_path: Path,
           plot: Callable[[dict, Path], None] | None = None,
           plot_path: Path | None = None) -> None:
    """A benchmark's ending: print its table, write its JSON (and its PNG plot)."""
    table(res)
    save(res, json_path)
    written = [json_path]
    if plot is not None and plot_path is not None:
        plot(res, plot_path)
        written.append(plot_path)
    print("wrote " + " and ".join(str(w) for w in written))


def launch_json(cluster: Any, argv: list[str], *, workers: int, timeout_s: float,
                verbose: bool, failed: str, servers: int = 0,
                hosts: list[int] | None = None) -> dict:
    """Run ``argv`` on ``workers`` hosts of ``cluster`` (and ``servers`` more, the same
    ``argv`` with ``AUTOTUNE_ROLE=server``; or on ``hosts``, one per rank; each rank's
    output echoed when ``verbose``) and return the ``MARK`` JSON rank 0 emitted; a failed
    job ends the benchmark with ``failed`` (who failed) and the job's error."""
    from autotune.emulate import EmulatorError

    job = cluster.launch(argv, workers=workers, servers=servers, timeout_s=timeout_s,
                         echo=sys.stderr if verbose else None, hosts=hosts)
    try:
        job.check()
        return job.last_json(MARK)
    except EmulatorError as e:
        raise SystemExit(f"{failed} failed:\n{e}") from None


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    """The lower quartile, the median and the upper quartile of ``xs``, all within the
    samples (``inclusive``: the default ``exclusive`` method extrapolates past them; of
    two samples, 0.2 and 1.0, it gives a lower quartile of 0.0, and a negative CPU time
    where they are further apart)."""
    if len(xs) < 2:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[1], q[2]


def emit(obj: dict) -> None:
    print(MARK + json.dumps(obj), flush=True)


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def add_cluster_args(ap: Any, flow_cap_help: str = "cap per TCP flow, e.g. 100mbit") -> None:
    """The emulated cluster's options a benchmark offers: ``--rate``, ``--flow-cap``,
    ``--congestion`` (given to :class:`~autotune.emulate.Cluster`)."""
    ap.add_argument("--rate", default="200mbit", help="NIC rate each way")
    ap.add_argument("--flow-cap", default=None, help=flow_cap_help)
    ap.add_argument("--congestion", default=None,
                    help="the hosts' TCP congestion control, e.g. cubic (default: this "
                         "machine's, see docs/emulate.md)")


def add_diagnosis_args(ap: Any, trace_help: str | None = None) -> None:
    """The runtime diagnosis options: ``--depth`` (:func:`patch_depth`) and, where the
    benchmark passes it on (``trace_help`` says to what), ``--trace`` (every rank writes its
    operations, :mod:`autotune.runtime.data.trace`)."""
    ap.add_argument("--depth", default=None,
                    help="diagnosis: the runtime's pipelining depths SEND[,TAIL[,SUM]] (e.g. 8,32,8)")
    if trace_help:
        ap.add_argument("--trace", type=Path, default=None,
                        help=f"diagnosis: {trace_help} TRACE/rank<r>.json (read them with "
                             "benchmarks/timeline.py)")


def patch_depth(depth: str | None) -> None:
    """Diagnosis only: set the runtime's pipelining depths in this process, read when a
    configuration is applied: ``SEND[,TAIL[,SUM]]`` = chunks a stream keeps on their way
    out, chunks it keeps in flight in all, units a Summation Service stream keeps posted
    (with no byte budget); see autotune/runtime/control/prepared.py."""
    if not depth:
        return
    from autotune.runtime.control import prepared

    vals = [int(x) for x in depth.split(",")]
    prepared.set_depths(send=vals[0],
                        tail=vals[1] if len(vals) > 1 else max(vals[0], prepared.TAIL_DEPTH),
                        sum_=vals[2] if len(vals) > 2 else max(vals[0], prepared.SUM_DEPTH),
                        inflight_bytes=1 << 40)


def fmt_cfg(cfg: dict) -> str:
    """A configuration in a few characters: ``pp k=2 s4 c4M`` / ``ar s1 c4M`` (and the
    intra-machine mode where it is not flat: ``ar s2 c2M root1``, ``... scatter``)."""
    c = cfg.get("chunk_bytes", 0)
    size = f"{c // MiB}M" if c >= MiB else f"{c // 1024}K"
    head = f"pp k={cfg.get('servers', 0)}" if cfg.get("transport") == "pushpull" else "ar"
    intra = cfg.get("intra", "flat")
    tail = "" if intra == "flat" else f" root{cfg.get('reduce_root', 0)}" if intra == "root" \
        else f" {intra}"
    return f"{head} s{cfg.get('streams', 1)} c{size}{tail}"


# ---- rank side ------------------------------------------------------------------------

# the emulated-compute job lives in the package (make demo runs it too)
from autotune.workload import model_shapes, sleepy_model  # noqa: E402,F401
