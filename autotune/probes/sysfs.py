"""The machine graph read from a sysfs tree (``/sys`` or a saved copy).

Reads ``bus/pci/devices`` (class codes, parent bridges from the device path, ``numa_node``,
link speed and width), ``class/net`` and ``class/infiniband`` (interface names and link
rates) and ``devices/system/node`` (NUMA nodes and their CPUs). GPUs are display/3D class
devices of any vendor except the display-only ones (BMC and emulated VGA); NICs are network
class devices that are not SR-IOV virtual functions.

PCIe switches are reported as *uplink groups*: every GPU or NIC below the same CPU root
port shares that port's link to the CPU, which is what BytePS's S_n/S_g rule is about
(the BytePS paper, OSDI 2020, §4.2.3). A group holding a single device straight on its root port is a
group of its own (``switched=False``).

GPU local indices follow PCI bus order (what ``nvidia-smi`` and ``CUDA_DEVICE_ORDER=
PCI_BUS_ID`` use).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

from autotune.errors import AutotuneError
from autotune.probes.graph import (
    GPU, HOST_BRIDGE, NIC, NUMA, PCIE, PCIE_SWITCH, ROOT, SMP, new_machine_graph, nic_label,
    pcie_gen, pcie_label)

BDF_RE = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
HOST_RE = re.compile(r"^pci([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2})$")

#: Vendors whose display-class devices are not compute GPUs (BMC video, emulated VGA).
DISPLAY_ONLY_VENDORS = {
    0x1A03: "ASPEED (BMC video)",
    0x102B: "Matrox (BMC video)",
    0x1234: "QEMU/Bochs VGA",
    0x1013: "Cirrus Logic VGA",
    0x15AD: "VMware SVGA",
    0x1B36: "Red Hat QXL",
    0x1AF4: "virtio-gpu",
    0x1414: "Hyper-V video",
    0x80EE: "VirtualBox VGA",
}
VENDOR_NAMES = {0x10DE: "nvidia", 0x1002: "amd", 0x8086: "intel", 0x15B3: "mellanox",
                0x14E4: "broadcom", 0x1AF4: "virtio", 0x1D0F: "amazon", 0x1924: "solarflare",
                0x8088: "wangxun", 0x19E5: "huawei"}


class SysfsError(AutotuneError, ValueError):
    """The sysfs tree is missing or holds something that cannot be read."""


@dataclass
class PciDevice:
    bdf: str
    chain: tuple[str, ...]  # host bridge, then each device from the root bus down to this one
    cls: int
    vendor: int | None
    device: int | None
    numa: int | None
    speed_gts: float | None
    width: int | None
    is_vf: bool

    @property
    def base_class(self) -> int:
        return self.cls >> 16


def normalize_bdf(bdf: str) -> str:
    """``00000000:3B:00.0`` (NVML) or ``0000:3b:00.0`` -> ``0000:3b:00.0``."""
    dom, bus, rest = bdf.strip().lower().split(":")
    return f"{int(dom, 16):04x}:{bus}:{rest}"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _hex(path: Path, *, required: bool = False) -> int | None:
    text = _read(path)
    if text is None:
        if required:
            raise SysfsError(f"{path}: missing or unreadable")
        return None
    try:
        return int(text, 16)
    except ValueError:
        if required:
            raise SysfsError(f"{path}: expected a hex number, got {text[:40]!r}") from None
        return None


def _int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _speed(path: Path) -> float | None:
    """``8.0 GT/s PCIe`` / ``8 GT/s`` -> 8.0; ``Unknown`` -> None."""
    text = _read(path)
    m = re.match(r"^\s*([0-9.]+)\s*GT/s", text or "")
    return float(m.group(1)) if m else None


def _chain(link: Path) -> tuple[str, ...] | None:
    """Host bridge and device path of a ``bus/pci/devices`` entry, from its link target."""
    try:
        real = Path(os.path.realpath(link))
    except OSError:
        return None
    parts = real.parts
    for i, part in enumerate(parts):
        if HOST_RE.match(part):
            chain = [part]
            for p in parts[i + 1:]:
                if not BDF_RE.match(p):
                    return None
                chain.append(p.lower())
            return tuple(chain) if len(chain) > 1 else None
    return None


def _read_devices(root: Path) -> dict[str, PciDevice]:
    pci_dir = root / "bus" / "pci" / "devices"
    if not pci_dir.is_dir():
        raise SysfsError(f"{pci_dir}: no such directory (is {root} a sysfs root?)")
    devices: dict[str, PciDevice] = {}
    for entry in sorted(pci_dir.iterdir()):
        if not BDF_RE.match(entry.name):
            continue
        chain = _chain(entry)
        if chain is None:
            continue
        bdf = chain[-1]
        numa = _int(entry / "numa_node")
        devices[bdf] = PciDevice(
            bdf=bdf,
            chain=chain,
            cls=_hex(entry / "class", required=True),  # type: ignore[arg-type]
            vendor=_hex(entry / "vendor"),
            device=_hex(entry / "device"),
            numa=numa if numa is not None and numa >= 0 else None,
            speed_gts=_speed(entry / "current_link_speed"),
            width=_int(entry / "current_link_width") or None,
            is_vf=(entry / "physfn").exists(),
        )
    return devices


def _nic_names(root: Path) -> dict[str, dict]:
    """PCI address -> {"netdev": [...], "ibdev": [...], "speed_gbps": float|None}."""
    out: dict[str, dict] = {}

    def pci_of(link: Path) -> str | None:
        try:
            parts = Path(os.path.realpath(link)).parts
        except OSError:
            return None
        bdfs = [p.lower() for p in parts if BDF_RE.match(p)]
        return bdfs[-1] if bdfs else None

    net = root / "class" / "net"
    if net.is_dir():
        for iface in sorted(net.iterdir()):
            bdf = pci_of(iface)
            if bdf is None:
                continue
            info = out.setdefault(bdf, {"netdev": [], "ibdev": [], "speed_gbps": None})
            info["netdev"].append(iface.name)
            mbps = _int(iface / "speed")
            if mbps and mbps > 0:
                info["speed_gbps"] = max(info["speed_gbps"] or 0.0, mbps / 1000.0)
    ib = root / "class" / "infiniband"
    if ib.is_dir():
        for dev in sorted(ib.iterdir()):
            bdf = pci_of(dev)
            if bdf is None:
                continue
            info = out.setdefault(bdf, {"netdev": [], "ibdev": [], "speed_gbps": None})
            info["ibdev"].append(dev.name)
            ports = dev / "ports"
            for port in sorted(ports.iterdir()) if ports.is_dir() else []:
                m = re.match(r"^\s*([0-9.]+)\s*Gb/sec", _read(port / "rate") or "")
                if m:
                    info["speed_gbps"] = max(info["speed_gbps"] or 0.0, float(m.group(1)))
    return out


def _numa_nodes(root: Path) -> dict[int, str]:
    """NUMA node id -> cpulist; one node 0 with the online CPUs when there is no NUMA info."""
    nodes: dict[int, str] = {}
    node_dir = root / "devices" / "system" / "node"
    if node_dir.is_dir():
        for d in node_dir.iterdir():
            m = re.match(r"^node(\d+)$", d.name)
            if m:
                nodes[int(m.group(1))] = _read(d / "cpulist") or ""
    if not nodes:
        nodes[0] = _read(root / "devices" / "system" / "cpu" / "online") or ""
    return dict(sorted(nodes.items()))


def _cpu_count(cpulist: str) -> int:
    n = 0
    for part in filter(None, cpulist.split(",")):
        lo, _, hi = part.partition("-")
        try:
            n += int(hi or lo) - int(lo) + 1
        except ValueError:
            return 0
    return n


def is_gpu(dev: PciDevice) -> bool:
    return dev.base_class == 0x03 and (dev.vendor not in DISPLAY_ONLY_VENDORS)


def is_nic(dev: PciDevice) -> bool:
    return dev.base_class == 0x02 and not dev.is_vf


def read_sysfs(root: str | Path = "/sys") -> nx.Graph:
    """The machine graph of the sysfs tree at ``root`` (the directory holding ``bus/``)."""
    root = Path(root)
    devices = _read_devices(root)
    names = _nic_names(root)
    numa_cpus = _numa_nodes(root)
    default_numa = next(iter(numa_cpus))

    g = new_machine_graph("sysfs", sysfs=str(root))
    for nid, cpus in numa_cpus.items():
        g.add_node(f"numa:{nid}", kind=NUMA, label="numa", numa=nid, cpus=cpus,
                   n_cpus=_cpu_count(cpus))
        g.add_edge(ROOT, f"numa:{nid}", kind=SMP, label="smp")

    endpoints = [d for d in devices.values() if is_gpu(d) or is_nic(d)]
    gpus = sorted((d for d in endpoints if is_gpu(d)), key=lambda d: d.bdf)
    gpu_index = {d.bdf: i for i, d in enumerate(gpus)}

    def numa_of(dev: PciDevice) -> int | None:
        for bdf in reversed(dev.chain[1:]):
            d = devices.get(bdf)
            if d is not None and d.numa is not None:
                return d.numa
        return None

    # host bridges holding GPUs or NICs, placed on their devices' most common NUMA node
    hb_numa: dict[str, Counter] = {}
    for dev in endpoints:
        counter = hb_numa.setdefault(dev.chain[0], Counter())
        numa = numa_of(dev)
        if numa is not None:
            counter[numa] += 1
    for hb, counter in sorted(hb_numa.items()):
        nid = counter.most_common(1)[0][0] if counter else default_numa
        if f"numa:{nid}" not in g:
            g.add_node(f"numa:{nid}", kind=NUMA, label="numa", numa=nid, cpus="", n_cpus=0)
            g.add_edge(ROOT, f"numa:{nid}", kind=SMP, label="smp")
        m = HOST_RE.match(hb)
        assert m is not None
        bus = f"{int(m.group(1), 16):04x}:{m.group(2).lower()}"
        g.add_node(f"hb:{bus}", kind=HOST_BRIDGE, label="host_bridge", bus=bus, numa=nid)
        g.add_edge(f"numa:{nid}", f"hb:{bus}", kind=PCIE, label="pcie:root")

    for dev in sorted(endpoints, key=lambda d: d.bdf):
        m = HOST_RE.match(dev.chain[0])
        assert m is not None
        hb = f"hb:{int(m.group(1), 16):04x}:{m.group(2).lower()}"
        parent = hb
        if len(dev.chain) > 2:  # below a root port: that port's uplink group
            port = dev.chain[1]
            parent = f"sw:{port}"
            switched = len(dev.chain) > 3
            if parent not in g:
                rp = devices.get(port)
                gen, width = (pcie_gen(rp.speed_gts), rp.width) if rp else (None, None)
                g.add_node(parent, kind=PCIE_SWITCH, label="pcie_switch", root_port=port,
                           switched=switched)
                g.add_edge(hb, parent, kind=PCIE, label=pcie_label(gen, width),
                           gen=gen, width=width)
            elif switched:
                g.nodes[parent]["switched"] = True
        numa = numa_of(dev)
        common = dict(bdf=dev.bdf, vendor=VENDOR_NAMES.get(dev.vendor or -1,
                                                            f"{dev.vendor or 0:04x}"),
                      pci_id=f"{dev.vendor or 0:04x}:{dev.device or 0:04x}", numa=numa)
        if is_gpu(dev):
            node = f"gpu:{gpu_index[dev.bdf]}"
            g.add_node(node, kind=GPU, label="gpu", index=gpu_index[dev.bdf], **common)
        else:
            info = names.get(dev.bdf, {"netdev": [], "ibdev": [], "speed_gbps": None})
            name = (info["ibdev"] or info["netdev"] or [dev.bdf])[0]
            node = f"nic:{name}"
            g.add_node(node, kind=NIC, label=nic_label(info["speed_gbps"]), name=name,
                       netdev=",".join(info["netdev"]), ibdev=",".join(info["ibdev"]),
                       speed_gbps=info["speed_gbps"], **common)
        gen = pcie_gen(dev.speed_gts)
        g.add_edge(parent, node, kind=PCIE, label=pcie_label(gen, dev.width), gen=gen,
                   width=dev.width)
    return g
