"""Traffic-shaping rules for one emulated NIC, as ``tc`` batch lines.

Pure functions, no side effects: they turn a :class:`LinkSpec` (rate, optional per-flow
cap, optional latency) into the ``tc`` commands that shape one direction of one veth.
:mod:`autotune.emulate.cluster` feeds them to ``tc -n <netns> -batch -``.

* Rate only: a ``tbf`` at the root of the device.
* Per-flow cap: an ``htb`` tree instead. Class ``1:1`` holds the NIC rate; one leaf per
  bucket of port bits (``2 * flow_bits`` bits: bits 1.. of the source and of the
  destination port, bit 0 is skipped because Linux gives ephemeral ports one parity),
  each guaranteed ``rate / buckets`` and allowed to borrow up to the per-flow cap, so one
  flow is held to the cap while several flows (several streams) share the whole NIC. Two
  flows in one bucket share one cap.

  - Without ``peers``, a ``u32`` filter per bucket matches the port bits. Flows to or
    from different hosts then collide too: the flows from 4 workers into one server share
    the server's listener port, so only 16 values of their own ports tell them apart
    (``tests/emulate/test_emulate.py``: two same-port flows from two hosts got 0.74 of
    the cap each).
  - With ``peers`` (the other hosts' addresses, and whether the peer is the packets'
    destination, on a host's own NIC, or their source, on the bridge's side), each peer
    has buckets of its own: ``u32`` hash tables key the bucket on the peer, then the
    port bits, and peer ``p`` (its position in ``peers``) puts a flow with port bits
    ``(s, d)`` in its bucket ``(p, s, d)``. Flows to or from different peers never share
    a bucket; flows to one peer (two streams between the same two hosts) collide about 1
    pair in ``2**(2 * flow_bits)`` when both ports differ. Three hash lookups per packet
    instead of a walk over every bucket's filter. (Until 2026-11-25 the peers shared one
    set of buckets, peer ``p``'s flow going to ``((s + p) mod n, (d + p) mod n)``; the
    ports of a job's connections are close together, so flows from peers ``p`` and
    ``p + 1`` whose port bits differ by one each collided, and about one capped job in
    five ran one server at half rate.)

  Real per-flow caps do not collide.
* Latency: a ``netem`` delay as the child of each shaping leaf (needs ``sch_netem``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from autotune.errors import AutotuneError

_UNITS = {"": 1, "bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")
_TIME_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s)?\s*$")

MTU_FRAME = 1514  # bytes on the wire for a full 1500-byte IP packet
GSO_MAX = 65536  # veth hands tc segments of up to 64 KiB


class ShapingError(AutotuneError, ValueError):
    """A rate, latency or link specification is not valid."""


def parse_rate(rate: str | int | float) -> int:
    """Bits per second of a tc-style rate: ``"200mbit"``, ``"1gbit"``, ``"500kbit"``,
    or a plain number of bits per second. SI units (1 mbit = 10**6 bit), as in tc.
    Byte units (``mbps`` means megaBYTES in tc) are refused to avoid the classic mix-up.
    """
    if isinstance(rate, (int, float)) and not isinstance(rate, bool):
        bits = float(rate)
    else:
        m = _RATE_RE.match(str(rate).lower())
        if not m or m.group(2) not in _UNITS:
            raise ShapingError(
                f"bad rate {rate!r}: use a number with bit, kbit, mbit or gbit (e.g. '200mbit')")
        bits = float(m.group(1)) * _UNITS[m.group(2)]
    if bits < 8000:
        raise ShapingError(f"rate {rate!r} is too low (minimum 8kbit)")
    return int(bits)


def parse_latency(latency: str | float | None) -> float:
    """Seconds of a delay: ``"5ms"``, ``"200us"``, ``"0.01s"`` or a number of seconds."""
    if latency is None:
        return 0.0
    if isinstance(latency, (int, float)) and not isinstance(latency, bool):
        sec = float(latency)
    else:
        m = _TIME_RE.match(str(latency).lower())
        if not m:
            raise ShapingError(f"bad latency {latency!r}: use e.g. '5ms', '200us' or '0.01s'")
        sec = float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0, None: 1.0}[m.group(2)]
    if sec < 0 or sec > 10:
        raise ShapingError(f"latency {latency!r} out of range (0..10 s)")
    return sec


def format_rate(bits_per_s: float) -> str:
    """Human form of a rate: ``200mbit``, ``1.5gbit``."""
    for unit, scale in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bits_per_s >= scale:
            return f"{bits_per_s / scale:g}{unit}"
    return f"{bits_per_s:g}bit"


@dataclass(frozen=True)
class LinkSpec:
    """How one host's NIC is shaped; the same rules apply in both directions.

    ``rate_bps``: NIC rate in bits/s. ``flow_cap_bps``: optional cap per TCP flow.
    ``latency_s``: optional one-way delay added on each shaped direction.
    ``flow_bits``: port bits per side used to tell flows apart (2**(2*flow_bits) buckets).
    """

    rate_bps: int
    flow_cap_bps: int | None = None
    latency_s: float = 0.0
    flow_bits: int = 4

    @classmethod
    def build(cls, rate: str | int | float, flow_cap: str | int | float | None = None,
              latency: str | float | None = None, flow_bits: int = 4) -> "LinkSpec":
        r = parse_rate(rate)
        cap = None if flow_cap is None else parse_rate(flow_cap)
        if cap is not None and cap > r:
            raise ShapingError(f"per-flow cap {format_rate(cap)} exceeds the NIC rate {format_rate(r)}")
        if not 1 <= flow_bits <= 4:
            raise ShapingError(f"flow_bits must be in 1..4, got {flow_bits}")
        return cls(rate_bps=r, flow_cap_bps=cap, latency_s=parse_latency(latency), flow_bits=flow_bits)

    @property
    def bytes_per_s(self) -> float:
        return self.rate_bps / 8.0

    @property
    def buckets(self) -> int:
        return 1 << (2 * self.flow_bits)


def _burst(rate_bps: float) -> int:
    """Token-bucket depth: 2 ms of traffic, and at least two full GSO skbs. tbf splits an
    skb longer than its bucket into MTU packets (qdisc_pkt_len of a 64 KiB TCP skb is
    ~68.5 KB with the per-segment headers), which multiplies the kernel's per-packet CPU
    cost by ~45 on this emulated path."""
    return max(2 * GSO_MAX, int(rate_bps / 8 * 0.002))


def _queue_limit(rate_bps: float) -> int:
    """Bytes the shaper may queue: 50 ms of traffic, at least 256 KiB."""
    return max(256 * 1024, int(rate_bps / 8 * 0.05))


def _netem_line(dev: str, parent: str, handle: str, spec: LinkSpec) -> str:
    us = max(1, int(round(spec.latency_s * 1e6)))
    return f"qdisc add dev {dev} parent {parent} handle {handle} netem delay {us}us limit 100000"


PEER_AWARE_MAX = 16  # more peers: the port-bits buckets alone (peers x 4**flow_bits classes)


def tc_lines(dev: str, spec: LinkSpec, peers: Sequence[str] = (), peer_is: str = "dst") -> list[str]:
    """``tc -batch`` lines that shape egress of ``dev`` per ``spec``. ``peers``: the other
    hosts' IPv4 addresses, which per-flow buckets then tell apart; ``peer_is``: ``"dst"``
    on a host's NIC (its egress goes to the peer), ``"src"`` on the bridge's side of it."""
    if spec.flow_cap_bps is None:
        lines = [
            f"qdisc add dev {dev} root handle 1: tbf rate {spec.rate_bps}bit "
            f"burst {_burst(spec.rate_bps)} limit {_queue_limit(spec.rate_bps)}",
        ]
        if spec.latency_s > 0:
            lines.append(_netem_line(dev, "1:1", "10:", spec))
        return lines
    if peer_is not in ("dst", "src"):
        raise ShapingError(f"peer_is must be 'dst' or 'src', got {peer_is!r}")
    return _htb_lines(dev, spec, list(peers) if len(peers) <= PEER_AWARE_MAX else [], peer_is)


def flow_bucket_minor(sport_bits: int, dport_bits: int, flow_bits: int, peer: int = 0) -> int:
    """htb class minor number (hex in tc) of peer ``peer``'s bucket of port bits
    ``(sport_bits, dport_bits)``; 1 and 2 are taken."""
    return 0x10 + (((peer << flow_bits) + sport_bits) << flow_bits) + dport_bits


def _htb_lines(dev: str, spec: LinkSpec, peers: list[str], peer_is: str) -> list[str]:
    rate, cap = spec.rate_bps, spec.flow_cap_bps
    assert cap is not None
    groups = max(1, len(peers))  # a set of buckets per peer (one when not peer-aware)
    buckets = spec.buckets * groups
    share = max(8000, rate // (buckets + 1))  # the buckets + the default class share the rate
    burst = _burst(rate)
    q = 2 * MTU_FRAME
    lines = [
        f"qdisc add dev {dev} root handle 1: htb default 2",
        f"class add dev {dev} parent 1: classid 1:1 htb rate {rate}bit ceil {rate}bit "
        f"burst {burst} cburst {burst} quantum {q}",
        # Everything that is not TCP (ARP, ...) gets the NIC rate through the parent.
        f"class add dev {dev} parent 1:1 classid 1:2 htb rate {share}bit ceil {rate}bit "
        f"burst {burst} cburst {burst} quantum {q}",
        # So do pure ACKs (a few % of a flow's bytes, but one per two segments): TCP
        # packets under 256 bytes whose only flag is ACK skip the bucket rules. Small
        # segments that carry data (PSH: gloo's short messages, a write's tail) must not:
        # overtaking their flow's queued segments, they reorder it, and TCP reads that as
        # loss (``ss -ti`` on the hosts showed reord_seen, lost and cwnd 1).
        f"filter add dev {dev} parent 1: protocol ip prio 1 u32 "
        f"match u16 0x0000 0xff00 at 2 match ip protocol 6 0xff match u8 0x10 0xff at 33 "
        f"flowid 1:2",
    ]
    leaves = ["1:2"]
    bits = spec.flow_bits
    mask = ((1 << bits) - 1) << 1
    cb = _burst(cap)
    for p in range(groups):
        for s in range(1 << bits):
            for d in range(1 << bits):
                minor = f"{flow_bucket_minor(s, d, bits, p):x}"
                lines.append(
                    f"class add dev {dev} parent 1:1 classid 1:{minor} htb rate {share}bit "
                    f"ceil {cap}bit burst {cb} cburst {cb} quantum {q}")
                if not peers:
                    lines.append(
                        f"filter add dev {dev} parent 1: protocol ip prio 2 u32 "
                        f"match ip protocol 6 0xff match ip sport {s << 1} 0x{mask:x} "
                        f"match ip dport {d << 1} 0x{mask:x} flowid 1:{minor}")
                leaves.append(f"1:{minor}")
    if peers:
        lines += _peer_filters(dev, peers, peer_is, bits)
    if spec.latency_s > 0:
        for i, leaf in enumerate(leaves):
            lines.append(_netem_line(dev, leaf, f"{0x100 + i:x}:", spec))
    return lines


def _peer_filters(dev: str, peers: list[str], peer_is: str, bits: int) -> list[str]:
    """u32 hash tables: peer (one filter each in the root table) -> source port bits
    (table ``0x100 + p``) -> destination port bits (table ``0x200 + p * n + s``) -> peer
    ``p``'s own bucket ``(s, d)``, ``n = 2**bits``."""
    n = 1 << bits
    head = f"filter add dev {dev} parent 1: protocol ip prio 2"
    sport_key = f"hashkey mask 0x{((n - 1) << 17):08x} at 20"  # bits 1.. of the source port
    dport_key = f"hashkey mask 0x{((n - 1) << 1):08x} at 20"   # ... of the destination port
    lines = []
    for p in range(len(peers)):
        lines.append(f"{head} handle {0x100 + p:x}: u32 divisor {n}")
        for s in range(n):
            lines.append(f"{head} handle {0x200 + p * n + s:x}: u32 divisor {n}")
    for p, addr in enumerate(peers):
        for s in range(n):
            for d in range(n):
                minor = flow_bucket_minor(s, d, bits, p)
                lines.append(f"{head} u32 ht {0x200 + p * n + s:x}:{d:x}: match u32 0 0 "
                             f"flowid 1:{minor:x}")
            lines.append(f"{head} u32 ht {0x100 + p:x}:{s:x}: match u32 0 0 {dport_key} "
                         f"link {0x200 + p * n + s:x}:")
        lines.append(f"{head} u32 ht 800:: match ip protocol 6 0xff match ip {peer_is} "
                     f"{addr}/32 {sport_key} link {0x100 + p:x}:")
    return lines
