"""An emulated cluster on one machine, for measuring communication where bandwidth is scarce.

Each host is a Linux network namespace with one NIC (a veth into a shared bridge) shaped
both ways with ``tbf`` (optionally a per-flow cap with ``htb`` + ``u32``, and latency
with ``netem`` where the kernel has it). :class:`Cluster` sets it up and tears it down,
and launches one process per rank with torchrun's environment; :func:`measure_bandwidth`
measures the achieved host-to-host bytes/s B over torch.distributed. Needs root;
:func:`unavailable_reason` says why not when it cannot run. See docs/emulate.md.
"""

from autotune.emulate.cluster import Cluster, Host, cleanup, congestion_controls
from autotune.emulate.launcher import JobResult, RankResult
from autotune.emulate.linkprobe import LinkMeasurement, measure_bandwidth
from autotune.emulate.netns import EmulatorError, has_netem, unavailable_reason
from autotune.emulate.shaping import LinkSpec, ShapingError, format_rate, parse_rate

__all__ = [
    "Cluster", "Host", "cleanup", "congestion_controls", "JobResult", "RankResult",
    "LinkMeasurement", "measure_bandwidth", "EmulatorError", "has_netem",
    "unavailable_reason", "LinkSpec", "ShapingError", "format_rate", "parse_rate",
    "leftovers",
]


def leftovers(prefix: str) -> dict[str, list]:
    """What of clusters named ``prefix...`` still exists: namespaces, root-namespace links,
    state and /etc/netns files. All empty after a clean teardown."""
    from autotune.emulate import netns
    from autotune.emulate.cluster import ETC_NETNS, STATE_DIR

    def files(d, pattern: str) -> list[str]:
        return sorted(str(p) for p in d.glob(pattern)) if d.exists() else []

    return {"namespaces": netns.list_netns(prefix), "links": netns.root_links(prefix),
            "files": files(STATE_DIR, f"{prefix}*.json") + files(ETC_NETNS, f"{prefix}*")}
