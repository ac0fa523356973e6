"""An emulated cluster on one machine: N hosts, each a network namespace with one NIC.

Host ``i`` is the namespace ``<name>-h<i>`` holding ``eth0`` (address ``10.77.0.<i+1>/24``),
one end of a veth pair; the other end, ``h<i>``, is a port of the bridge ``br0`` in the
namespace ``<name>-br``. Both ends are shaped (:mod:`autotune.emulate.shaping`): ``eth0``
egress is what the host sends, ``h<i>`` egress is what it receives. Nothing is created
in the root namespace and the subnet exists only inside these namespaces, so several
clusters can live side by side.

``with Cluster(hosts=4, rate="200mbit") as c: c.launch([...], workers=4).check()``
sets it up, runs one process per rank with the torchrun-style environment and tears it
all down on success, failure, timeout, Ctrl-C or SIGTERM.

TCP congestion control: the hosts use the machine's default (``congestion=None``) or the
algorithm named, set on each host's route to the cluster subnet (``ip route ... congctl``),
since a namespace may set as its default only what the root namespace allows
(``net.ipv4.tcp_allowed_congestion_control``), and a route's algorithm has no such limit.
It applies to both ends of every connection between hosts, senders and receivers alike.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import secrets
import shutil
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence, TextIO

from autotune.emulate import netns
from autotune.emulate.launcher import JobResult, RankSpec, run_ranks
from autotune.emulate.netns import ETC_NETNS, PREFIX, EmulatorError
from autotune.emulate.shaping import LinkSpec, format_rate, tc_lines
from autotune.ranks import kill_pids, pid_alive

SUBNET = "10.77.0"
IFNAME = "eth0"
MAX_HOSTS = 200
STATE_DIR = Path("/run/autotune-emulate")


@dataclass(frozen=True)
class Host:
    index: int
    netns: str
    addr: str
    ifname: str = IFNAME


class Cluster:
    """N emulated hosts joined by a shaped bridge. Use as a context manager."""

    def __init__(self, hosts: int = 3, rate: str | int = "200mbit", *,
                 flow_cap: str | int | None = None, latency: str | float | None = None,
                 flow_bits: int = 4, congestion: str | None = None,
                 name: str | None = None) -> None:
        if not 1 <= hosts <= MAX_HOSTS:
            raise EmulatorError(f"hosts must be in 1..{MAX_HOSTS}, got {hosts}")
        if congestion is not None and congestion not in congestion_controls():
            raise EmulatorError(
                f"congestion control {congestion!r} is not available on this kernel "
                f"(net.ipv4.tcp_available_congestion_control: "
                f"{' '.join(congestion_controls()) or 'unreadable'})")
        self.congestion = congestion
        self.link = LinkSpec.build(rate, flow_cap=flow_cap, latency=latency, flow_bits=flow_bits)
        self.name = name or f"{PREFIX}{secrets.token_hex(3)}"
        if not self.name.startswith(PREFIX) or len(self.name) > 40 or not self.name.isalnum():
            raise EmulatorError(f"cluster name must be alphanumeric, start with {PREFIX!r}, "
                                f"at most 40 chars; got {self.name!r}")
        self.hosts = [Host(i, f"{self.name}-h{i}", f"{SUBNET}.{i + 1}") for i in range(hosts)]
        self.bridge_netns = f"{self.name}-br"
        self.is_up = False
        self._next_port = 29500
        self._old_handlers: dict[int, object] = {}
        self._started: list[int] = []  # pids of every rank process ever started

    # ---- life cycle -------------------------------------------------------------------
    def up(self, persistent: bool = False) -> "Cluster":
        """Create the namespaces, links and shaping. Undoes everything if a step fails.
        ``persistent``: leave it for a later ``down`` (the CLI's ``up``); ``cleanup``
        will then not treat it as a crashed run's leftover."""
        netns.require()
        if self.link.latency_s > 0 and not netns.has_netem():
            raise EmulatorError("latency needs the netem qdisc (sch_netem), which this kernel "
                                "lacks; run without latency")
        if any(n in netns.list_netns(self.name) for n in self.namespaces()):
            raise EmulatorError(f"a cluster named {self.name} already exists (`cleanup` it?)")
        if not persistent:
            atexit.register(self.down)
        self._write_state(None if persistent else os.getpid())
        try:
            self._create()
        except BaseException:
            self.down()
            raise
        self.is_up = True
        return self

    def _create(self) -> None:
        br = self.bridge_netns
        hosts_file = "127.0.0.1 localhost\n::1 localhost\n" + "".join(
            f"{h.addr} {h.netns}\n::ffff:{h.addr} {h.netns}\n" for h in self.hosts)
        for ns in self.namespaces():
            d = ETC_NETNS / ns
            d.mkdir(parents=True, exist_ok=True)
            (d / "hosts").write_text(hosts_file)
            (d / "resolv.conf").write_text("# no DNS inside the emulated cluster\n")
        netns.sh("ip", "netns", "add", br)
        netns.sh("ip", "-n", br, "-batch", "-", stdin="\n".join([
            "link set lo up", "link add br0 type bridge", "link set br0 up"]) + "\n")
        for h in self.hosts:
            netns.sh("ip", "netns", "add", h.netns)
            peer = f"h{h.index}"
            netns.sh("ip", "-n", h.netns, "link", "add", h.ifname, "type", "veth",
                     "peer", "name", peer, "netns", br)
            netns.sh("ip", "-n", h.netns, "-batch", "-", stdin="\n".join([
                "link set lo up", f"addr add {h.addr}/24 dev {h.ifname}",
                f"link set {h.ifname} up"]) + "\n")
            if self.congestion:
                netns.sh("ip", "-n", h.netns, "route", "replace", f"{SUBNET}.0/24", "dev",
                         h.ifname, "proto", "kernel", "scope", "link", "src", h.addr,
                         "congctl", self.congestion)
            netns.sh("ip", "-n", br, "-batch", "-", stdin="\n".join([
                f"link set {peer} master br0", f"link set {peer} up"]) + "\n")
            self._shape(h, self.link)

    def _shape(self, h: Host, link: LinkSpec) -> None:
        """Both directions of host ``h``'s NIC: its egress (to a peer) and the bridge's
        port toward it (from a peer); per-flow buckets tell the peers apart."""
        peers = [o.addr for o in self.hosts if o.index != h.index]
        for ns, dev, peer_is in ((h.netns, h.ifname, "dst"),
                                 (self.bridge_netns, f"h{h.index}", "src")):
            netns.sh("tc", "-n", ns, "-batch", "-",
                     stdin="\n".join(tc_lines(dev, link, peers, peer_is)) + "\n")

    def reshape(self, rate: str | int | None = None, *, flow_cap: str | int | None = None,
                hosts: Sequence[int] | None = None) -> LinkSpec:
        """Shape the NICs of ``hosts`` (default: all) anew while jobs run, both ways: the
        NIC ``rate`` (default: as it is) and ``flow_cap`` (``None``: none). Each root
        qdisc is replaced (for a moment the link is unshaped); open connections go on
        under the new rules. Returns the new link; ``link`` follows when all hosts change."""
        link = LinkSpec.build(self.link.rate_bps if rate is None else rate, flow_cap=flow_cap,
                              latency=self.link.latency_s, flow_bits=self.link.flow_bits)
        for i in (range(len(self.hosts)) if hosts is None else hosts):
            h = self.hosts[i]
            for ns, dev in ((h.netns, h.ifname), (self.bridge_netns, f"h{h.index}")):
                netns.sh("tc", "-n", ns, "qdisc", "del", "dev", dev, "root")
            self._shape(h, link)
        if hosts is None:
            self.link = link
        return link

    def down(self) -> list[str]:
        """Kill every process in the cluster's namespaces and delete them. Idempotent.
        Returns the namespaces that could not be removed (normally none)."""
        try:
            atexit.unregister(self.down)
        except Exception:  # pragma: no cover
            pass
        kill_pids(self._started, grace_s=1.0)
        names = [n for n in netns.list_netns(self.name) if n in self.namespaces()]
        failed = netns.delete_netns(names) if names else []
        if not failed:
            _remove_etc(self.namespaces())
            self._state_path().unlink(missing_ok=True)
        self.is_up = False
        return failed

    def namespaces(self) -> list[str]:
        return [h.netns for h in self.hosts] + [self.bridge_netns]

    def __enter__(self) -> "Cluster":
        self._trap_signals()
        try:
            return self.up()
        except BaseException:
            self._restore_signals()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self.down()
        finally:
            self._restore_signals()

    def _trap_signals(self) -> None:
        """Turn SIGTERM/SIGHUP into SystemExit so ``__exit__`` tears down (SIGINT already
        raises KeyboardInterrupt). Only possible in the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGHUP):
            self._old_handlers[sig] = signal.signal(sig, _raise_exit)

    def _restore_signals(self) -> None:
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)  # type: ignore[arg-type]
        self._old_handlers.clear()

    # ---- state (for cleanup and the CLI) ----------------------------------------------
    def _state_path(self) -> Path:
        return STATE_DIR / f"{self.name}.json"

    def _write_state(self, owner_pid: int | None) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        self._state_path().write_text(json.dumps({
            "name": self.name, "hosts": len(self.hosts), "owner_pid": owner_pid,
            "rate_bps": self.link.rate_bps, "flow_cap_bps": self.link.flow_cap_bps,
            "latency_s": self.link.latency_s, "flow_bits": self.link.flow_bits}))

    @classmethod
    def attach(cls, name: str) -> "Cluster":
        """The cluster ``name`` brought up earlier (e.g. by ``python -m autotune.emulate up``)."""
        path = STATE_DIR / f"{name}.json"
        if not path.exists():
            raise EmulatorError(f"no emulated cluster named {name!r} (see `list`)")
        st = json.loads(path.read_text())
        c = cls(st["hosts"], st["rate_bps"], flow_cap=st["flow_cap_bps"],
                latency=st["latency_s"] or None, flow_bits=st["flow_bits"], name=st["name"])
        missing = [n for n in c.namespaces() if n not in netns.list_netns(name)]
        if missing:
            raise EmulatorError(f"cluster {name} is incomplete (missing {missing}); `cleanup` it")
        c.is_up = True
        return c

    # ---- running ranks ----------------------------------------------------------------
    def wrap(self, host: int, argv: Sequence[str]) -> list[str]:
        """Command line that runs ``argv`` inside host ``host``'s namespace, with its own
        hostname (UTS namespace) when ``unshare`` is available."""
        h = self.hosts[host]
        inner = list(argv)
        if shutil.which("unshare"):
            inner = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', h.netns, *inner]
        return ["ip", "netns", "exec", h.netns, *inner]

    def env(self, *, rank: int, world_size: int, host: int, role: str, master_port: int,
            extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of one rank: torchrun's variables (one process per host), the
        host's NIC for gloo, and the emulator's facts for benchmarks."""
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")  # one core per emulated host
        env.update({
            "MASTER_ADDR": self.hosts[0].addr, "MASTER_PORT": str(master_port),
            "RANK": str(rank), "WORLD_SIZE": str(world_size),
            "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
            "GROUP_RANK": str(host), "NODE_RANK": str(host), "GROUP_WORLD_SIZE": str(len(self.hosts)),
            "GLOO_SOCKET_IFNAME": IFNAME, "AUTOTUNE_ROLE": role,
            "AUTOTUNE_MACHINE": self.hosts[host].netns, "AUTOTUNE_HOST_ADDR": self.hosts[host].addr,
            "AUTOTUNE_EMULATED_RATE_BPS": str(self.link.rate_bps),
        })
        if self.link.flow_cap_bps:
            env["AUTOTUNE_EMULATED_FLOW_CAP_BPS"] = str(self.link.flow_cap_bps)
        if extra:
            env.update(extra)
        return env

    def launch(self, argv: Sequence[str], *, workers: int, servers: int = 0,
               server_argv: Sequence[str] | None = None, timeout_s: float = 300.0,
               env: dict[str, str] | None = None,
               echo: TextIO | Callable[[str], None] | None = None,
               hosts: Sequence[int] | None = None) -> JobResult:
        """Run a job: worker ranks 0..n-1 on hosts 0..n-1, server ranks n..n+k-1 on hosts
        n..n+k-1 (or on ``hosts``, one per rank, in rank order). Servers run
        ``server_argv`` (default: the workers' ``argv``; ``AUTOTUNE_ROLE`` tells them
        apart). Returns when all exit, one fails (+ grace), or at the timeout."""
        if not self.is_up:
            raise EmulatorError("the cluster is not up")
        world = workers + servers
        if workers < 1 or servers < 0:
            raise EmulatorError(f"need workers >= 1 and servers >= 0, got {workers}, {servers}")
        placement = list(hosts) if hosts is not None else list(range(world))
        if len(placement) != world:
            raise EmulatorError(f"hosts lists {len(placement)} hosts for {world} ranks")
        crowded = hosts is None and world > len(self.hosts)  # given hosts may be shared
        if crowded or any(not 0 <= h < len(self.hosts) for h in placement):
            raise EmulatorError(f"{workers} workers + {servers} servers do not fit on "
                                f"{len(self.hosts)} hosts")
        port = self._next_port
        self._next_port = 29500 + (self._next_port - 29500 + 1) % 1000
        specs = []
        for rank, host in enumerate(placement):
            role = "worker" if rank < workers else "server"
            cmd = list(argv if role == "worker" or server_argv is None else server_argv)
            specs.append(RankSpec(rank=rank, role=role, host=host, argv=cmd,
                                  wrapper=self.wrap(host, []),
                                  enter=functools.partial(netns.enter, self.hosts[host].netns),
                                  env=self.env(rank=rank, world_size=world, host=host, role=role,
                                               master_port=port, extra=env)))
        result = run_ranks(specs, timeout_s=timeout_s, echo=echo)
        self._started.extend(r.pid for r in result.ranks)
        return result

    def python(self, *args: str) -> list[str]:
        """``argv`` for running this interpreter with ``args`` (e.g. ``-m``, ``pkg.mod``)."""
        return [sys.executable, *args]

    def describe(self) -> str:
        lk = self.link
        extra = f", per-flow cap {format_rate(lk.flow_cap_bps)}" if lk.flow_cap_bps else ""
        extra += f", latency {lk.latency_s * 1e3:g} ms" if lk.latency_s else ""
        extra += f", TCP {self.congestion}" if self.congestion else ""
        return (f"{self.name}: {len(self.hosts)} hosts at {format_rate(lk.rate_bps)} each way"
                f"{extra}; " + ", ".join(f"h{h.index}={h.addr}" for h in self.hosts))


def congestion_controls() -> list[str]:
    """The TCP congestion control algorithms this kernel has loaded."""
    try:
        return Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    except OSError:
        return []


def _raise_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def cleanup(prefix: str = PREFIX, include_live: bool = False,
            include_persistent: bool = False) -> list[str]:
    """Remove what crashed runs left: namespaces named ``prefix...`` whose owning process
    is gone (and their processes, links and state files). Clusters whose owner still runs
    are kept unless ``include_live``; ones made by ``up`` (no owner) unless
    ``include_persistent``. Returns the namespaces removed."""
    if not prefix.startswith(PREFIX):
        raise EmulatorError(f"prefix must start with {PREFIX!r}")
    keep: set[str] = set()
    if STATE_DIR.exists():
        for path in STATE_DIR.glob(f"{prefix}*.json"):
            try:
                st = json.loads(path.read_text())
            except (OSError, ValueError):
                st = {}
            owner = st.get("owner_pid")
            live = owner is not None and pid_alive(int(owner))
            persistent = "owner_pid" in st and owner is None
            if (live and not include_live) or (persistent and not include_persistent):
                keep.add(st.get("name", path.stem))
            else:
                path.unlink(missing_ok=True)
    victims = [n for n in netns.list_netns(prefix) if n.rsplit("-", 1)[0] not in keep]
    failed = netns.delete_netns(victims)
    if failed:
        raise EmulatorError(f"could not delete namespaces {failed}")
    if ETC_NETNS.exists():
        _remove_etc([d.name for d in ETC_NETNS.glob(f"{prefix}*")
                     if d.name.rsplit("-", 1)[0] not in keep])
    return victims


def _remove_etc(names: list[str]) -> None:
    for ns in names:
        d = ETC_NETNS / ns
        if d.is_dir() and ns.startswith(PREFIX):
            for f in ("hosts", "resolv.conf"):
                (d / f).unlink(missing_ok=True)
            try:
                d.rmdir()
            except OSError:
                pass
