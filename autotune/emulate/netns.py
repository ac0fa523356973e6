"""Thin wrappers around ``ip`` and ``tc`` for network namespaces.

Everything the emulator does to the system goes through here: checking that namespaces
can be used at all, creating and deleting namespaces, finding and killing the processes
inside them, listing what is left over, and moving a process into a host's namespaces
(:func:`enter`). Nothing is created in the root namespace.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import subprocess
from functools import lru_cache
from pathlib import Path

from autotune.errors import AutotuneError
from autotune.ranks import kill_pids  # the emulator stops what runs in a namespace with it

PREFIX = "atemu"  # every namespace the emulator creates starts with this
NETNS_DIR = Path("/run/netns")  # where `ip netns add` pins each namespace
ETC_NETNS = Path("/etc/netns")  # `ip netns exec NS` bind-mounts /etc/netns/NS/* over /etc

# <sched.h>, <sys/mount.h>
_CLONE_NEWNS, _CLONE_NEWUTS, _CLONE_NEWNET = 0x00020000, 0x04000000, 0x40000000
_MS_RDONLY, _MS_BIND, _MS_REC, _MS_SLAVE = 1, 1 << 12, 1 << 14, 1 << 19
_MNT_DETACH = 2


class EmulatorError(AutotuneError, RuntimeError):
    """The emulated cluster cannot be set up, used or torn down."""


def sh(*argv: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run one command; on failure raise :class:`EmulatorError` with its stderr."""
    proc = subprocess.run(list(argv), input=stdin, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise EmulatorError(f"`{' '.join(argv)}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


@lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """Why network namespaces cannot be used here, or None when they can.

    Checks root, the ``ip``/``tc`` tools, and then really creates and deletes a probe
    namespace with a veth pair and a tbf qdisc (containers often lack the capability).
    """
    if os.name != "posix" or not hasattr(os, "geteuid"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "the cluster emulator needs root (network namespaces, veth, tc)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` (iproute2) is not installed"
    probe = f"{PREFIX}probe{os.getpid()}"
    try:
        r = sh("ip", "netns", "add", probe, check=False)
        if r.returncode != 0:
            return f"`ip netns add` is unavailable: {r.stderr.strip()}"
        for argv in (
            ("ip", "-n", probe, "link", "add", "a0", "type", "veth", "peer", "name", "b0"),
            ("tc", "-n", probe, "qdisc", "add", "dev", "a0", "root", "tbf", "rate", "1mbit",
             "burst", "32kb", "limit", "65536"),
        ):
            r = sh(*argv, check=False)
            if r.returncode != 0:
                return f"`{' '.join(argv[3:])}` is unavailable in a namespace: {r.stderr.strip()}"
    finally:
        sh("ip", "netns", "del", probe, check=False)
    return None


@lru_cache(maxsize=1)
def has_netem() -> bool:
    """Whether the kernel has the ``netem`` qdisc (needed for latency)."""
    probe = f"{PREFIX}netem{os.getpid()}"
    try:
        if sh("ip", "netns", "add", probe, check=False).returncode != 0:
            return False
        sh("ip", "-n", probe, "link", "add", "a0", "type", "veth", "peer", "name", "b0", check=False)
        r = sh("tc", "-n", probe, "qdisc", "add", "dev", "a0", "root", "netem", "delay", "1ms",
               check=False)
        return r.returncode == 0
    finally:
        sh("ip", "netns", "del", probe, check=False)


def require() -> None:
    """Raise :class:`EmulatorError` saying why, when namespaces cannot be used."""
    reason = unavailable_reason()
    if reason:
        raise EmulatorError(reason)


def list_netns(prefix: str = PREFIX) -> list[str]:
    """Names of the namespaces whose name starts with ``prefix``."""
    if shutil.which("ip") is None:
        return []
    out = sh("ip", "netns", "list", check=False).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return sorted(n for n in names if n.startswith(prefix))


def netns_pids(ns: str) -> list[int]:
    """Processes running inside namespace ``ns``."""
    r = sh("ip", "netns", "pids", ns, check=False)
    return [int(p) for p in r.stdout.split() if p.strip().isdigit()]


def delete_netns(names: list[str]) -> list[str]:
    """Kill every process inside each namespace, then delete it (its veths go with it).
    Returns the names that could not be deleted."""
    for ns in names:
        kill_pids(netns_pids(ns), grace_s=1.0)
    failed = []
    for ns in names:
        if sh("ip", "netns", "del", ns, check=False).returncode != 0 and ns in list_netns(ns):
            failed.append(ns)
    return failed


def root_links(prefix: str = PREFIX) -> list[str]:
    """Links in the root namespace whose name starts with ``prefix`` (there should be none)."""
    out = sh("ip", "-o", "link", "show", check=False).stdout
    links = []
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) > 1:
            name = parts[1].strip().split("@")[0]
            if name.startswith(prefix):
                links.append(name)
    return links


def enter(ns: str) -> None:
    """Move this process into namespace ``ns`` as ``ip netns exec NS unshare --uts`` with
    the host name ``NS`` would start a command there: the network namespace joined, a
    mount namespace of its own (mounts seen from the root one, none made here seen
    there) with ``/sys`` showing the namespace's devices and ``/etc/netns/NS/*`` over
    ``/etc``, and a UTS namespace of its own named ``ns``. For a process with one thread
    (a rank just forked, :func:`autotune.forked.start`); Python 3.11 has no ``os.setns``
    and ``os.unshare``, so libc's. Raises ``OSError`` naming the step that failed."""
    libc = ctypes.CDLL(None, use_errno=True)

    def call(what: str, ret: int) -> None:
        if ret != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{what} for namespace {ns}: {os.strerror(err)}")

    fd = os.open(NETNS_DIR / ns, os.O_RDONLY | os.O_CLOEXEC)
    try:
        call("setns", libc.setns(fd, _CLONE_NEWNET))
    finally:
        os.close(fd)
    call("unshare", libc.unshare(_CLONE_NEWNS | _CLONE_NEWUTS))
    call("mount --make-rslave /", libc.mount(b"none", b"/", None, _MS_REC | _MS_SLAVE, None))
    flags = _MS_RDONLY if os.statvfs("/sys").f_flag & os.ST_RDONLY else 0
    if libc.umount2(b"/sys", _MNT_DETACH) == 0:
        call("mount /sys", libc.mount(ns.encode(), b"/sys", b"sysfs", flags, None))
    etc = ETC_NETNS / ns
    for f in sorted(etc.iterdir()) if etc.is_dir() else []:
        call(f"mount --bind {f} /etc/{f.name}", libc.mount(
            bytes(f), f"/etc/{f.name}".encode(), b"none", _MS_BIND, None))
    socket.sethostname(ns)
