"""Build fixture sysfs trees for the topology probes (and one ``nvidia-smi topo -m`` text).

The two machines of BytePS (the BytePS paper (OSDI 2020, §4.2), Fig. 6(a) and 8(a)):

- ``pcie_only``: two sockets, each with one PCIe switch holding four GPUs; the 100G NIC
  sits on its own root port under CPU0 (its own lanes). Also a BMC VGA (not a GPU), an
  onboard 1G NIC on its own root port and an SR-IOV virtual function (not a NIC).
- ``nvlink_box``: four PCIe switches with two GPUs each (P0, P1 under CPU0 on two root
  complexes; P2, P3 under CPU1), the 100G NIC on P0; its NVLinks (the DGX-1 hybrid cube
  mesh) are in ``nvlink_box.topo.txt``, as sysfs does not show NVLink.
- ``cpu_only``: a VM like the CI machine: no NUMA directory, a virtio NIC straight on the
  root bus (its netdev below a ``virtio0`` device), a loopback interface.

Usage: ``python tests/make_sysfs_fixtures.py OUTDIR`` (tests call :func:`build_all`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

NVIDIA, MELLANOX, INTEL, ASPEED, VIRTIO = 0x10DE, 0x15B3, 0x8086, 0x1A03, 0x1AF4
BRIDGE, HOST, GPU3D, VGA, ETH, IB, AUDIO = (
    0x060400, 0x060000, 0x030200, 0x030000, 0x020000, 0x020700, 0x040300)


class Tree:
    """Writes a sysfs-shaped tree: ``devices/``, ``bus/pci/devices`` and ``class/`` links."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        (self.root / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)

    def _dev_dir(self, host: str, chain: list[str]) -> Path:
        return self.root.joinpath("devices", host, *chain)

    def numa(self, nid: int, cpulist: str) -> None:
        d = self.root / "devices" / "system" / "node" / f"node{nid}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpulist").write_text(cpulist + "\n")

    def cpus_online(self, cpulist: str) -> None:
        d = self.root / "devices" / "system" / "cpu"
        d.mkdir(parents=True, exist_ok=True)
        (d / "online").write_text(cpulist + "\n")

    def device(self, host: str, chain: list[str], cls: int, vendor: int, device: int = 0x1234,
               *, numa: int = -1, speed: str | None = "8.0 GT/s PCIe", width: int | None = 16,
               physfn: str | None = None) -> Path:
        d = self._dev_dir(host, chain)
        d.mkdir(parents=True, exist_ok=True)
        files = {"class": f"0x{cls:06x}", "vendor": f"0x{vendor:04x}",
                 "device": f"0x{device:04x}", "numa_node": str(numa)}
        if speed is not None:
            files["current_link_speed"] = speed
        if width is not None:
            files["current_link_width"] = str(width)
        for name, text in files.items():
            (d / name).write_text(text + "\n")
        if physfn is not None:
            (d / "physfn").symlink_to(Path("..") / physfn)
        link = self.root / "bus" / "pci" / "devices" / chain[-1]
        target = Path("..", "..", "..", "devices", host, *chain)
        if not link.is_symlink():
            link.symlink_to(target)
        return d

    def bridge(self, host: str, chain: list[str], *, numa: int = -1,
               speed: str = "8.0 GT/s PCIe", width: int = 16) -> None:
        self.device(host, chain, BRIDGE, INTEL, 0x2030, numa=numa, speed=speed, width=width)

    def net(self, dev_dir: Path, ifname: str, speed_mbps: int | None) -> None:
        d = dev_dir / "net" / ifname
        d.mkdir(parents=True, exist_ok=True)
        (d / "speed").write_text(f"{speed_mbps if speed_mbps is not None else -1}\n")
        self._class_link("net", ifname, d)

    def ib(self, dev_dir: Path, name: str, rate: str) -> None:
        d = dev_dir / "infiniband" / name
        (d / "ports" / "1").mkdir(parents=True, exist_ok=True)
        (d / "ports" / "1" / "rate").write_text(rate + "\n")
        self._class_link("infiniband", name, d)

    def virtual_net(self, ifname: str) -> None:
        d = self.root / "devices" / "virtual" / "net" / ifname
        d.mkdir(parents=True, exist_ok=True)
        (d / "speed").write_text("-1\n")
        self._class_link("net", ifname, d)

    def _class_link(self, cls: str, name: str, target: Path) -> None:
        link = self.root / "class" / cls / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path(os.path.relpath(target, link.parent)))


def _switch(t: Tree, host: str, root_port: str, up: str, downs: list[str],
            endpoints: list[tuple[int, int, int]], numa: int) -> list[Path]:
    """A root port, a switch (upstream + downstream ports) and one endpoint per port."""
    t.bridge(host, [root_port], numa=numa)
    t.bridge(host, [root_port, up], numa=numa)
    out = []
    for down, (cls, vendor, devid) in zip(downs, endpoints):
        t.bridge(host, [root_port, up, down], numa=numa)
        bus = int(down.split(":")[1], 16) + 1 + downs.index(down)
        bdf = f"{down[:4]}:{bus:02x}:00.0"
        out.append(t.device(host, [root_port, up, down, bdf], cls, vendor, devid, numa=numa))
    return out


def pcie_only(root: str | Path) -> Path:
    """The BytePS paper (OSDI 2020) Fig. 6(a): 2 switches x 4 GPUs, the NIC on its own root port under CPU0."""
    t = Tree(root)
    t.numa(0, "0-23")
    t.numa(1, "24-47")
    h0, h1 = "pci0000:00", "pci0000:80"
    t.device(h0, ["0000:00:00.0"], HOST, INTEL, 0x2020, numa=0, speed=None, width=None)
    v100 = (GPU3D, NVIDIA, 0x1DB4)
    _switch(t, h0, "0000:00:01.0", "0000:01:00.0",
            [f"0000:02:0{i}.0" for i in range(4)], [v100] * 4, numa=0)
    _switch(t, h1, "0000:80:01.0", "0000:81:00.0",
            [f"0000:82:0{i}.0" for i in range(4)], [v100] * 4, numa=1)
    # the 100G NIC on its own lanes: a root port of CPU0 with nothing else below
    t.bridge(h0, ["0000:00:02.0"], numa=0)
    nic = t.device(h0, ["0000:00:02.0", "0000:07:00.0"], ETH, MELLANOX, 0x1017, numa=0)
    t.net(nic, "ens2f0", 100000)
    t.ib(nic, "mlx5_0", "100 Gb/sec (4X EDR)")
    # its SR-IOV virtual function: not a NIC of its own
    t.device(h0, ["0000:00:02.0", "0000:07:00.2"], ETH, MELLANOX, 0x1018, numa=0,
             physfn="0000:07:00.0")
    # BMC video behind a PCIe-to-PCI bridge: display class, but not a GPU
    t.bridge(h0, ["0000:00:1c.0"], numa=0, speed="2.5 GT/s PCIe", width=1)
    t.bridge(h0, ["0000:00:1c.0", "0000:08:00.0"], numa=0, speed="2.5 GT/s PCIe", width=1)
    t.device(h0, ["0000:00:1c.0", "0000:08:00.0", "0000:09:00.0"], VGA, ASPEED, 0x2000,
             numa=0, speed="Unknown", width=0)
    # onboard 1G management NIC on its own root port
    t.bridge(h0, ["0000:00:1c.4"], numa=0, speed="5.0 GT/s PCIe", width=4)
    eno = t.device(h0, ["0000:00:1c.4", "0000:0a:00.0"], ETH, INTEL, 0x1521, numa=0,
                   speed="5.0 GT/s PCIe", width=4)
    t.net(eno, "eno1", 1000)
    return t.root


def nvlink_box(root: str | Path, nics_on: tuple[int, ...] = (0,)) -> Path:
    """The BytePS paper (OSDI 2020) Fig. 8(a): 4 switches x 2 GPUs, the NIC on switch P0 (``nics_on``)."""
    t = Tree(root)
    t.numa(0, "0-19,40-59")
    t.numa(1, "20-39,60-79")
    sxm2 = (GPU3D, NVIDIA, 0x1DB1)
    nic = (IB, MELLANOX, 0x1017)
    # (host bridge, root port, upstream, downstream prefix, numa) of P0..P3
    switches = [("pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02", 0),
                ("pci0000:3a", "0000:3a:00.0", "0000:3b:00.0", "0000:3c", 0),
                ("pci0000:85", "0000:85:00.0", "0000:86:00.0", "0000:87", 1),
                ("pci0000:ae", "0000:ae:00.0", "0000:af:00.0", "0000:b0", 1)]
    n_nic = 0
    for k, (host, rp, up, down, numa) in enumerate(switches):
        endpoints = [sxm2, sxm2] + ([nic] if k in nics_on else [])
        downs = [f"{down}:{i:02x}.0" for i in range(len(endpoints))]
        devs = _switch(t, host, rp, up, downs, endpoints, numa=numa)
        if k in nics_on:
            t.ib(devs[-1], f"mlx5_{n_nic}", "100 Gb/sec (4X EDR)")
            t.net(devs[-1], f"ib{n_nic}", 100000)
            n_nic += 1
    return t.root


#: The DGX-1 hybrid cube mesh (NV1/NV2) of the NVLink box; "" where PCIe shows instead.
_NV = ["X   NV1 NV1 NV2 NV2 SYS SYS SYS", "NV1 X   NV2 NV1 SYS NV2 SYS SYS",
       "NV1 NV2 X   NV2 SYS SYS NV1 SYS", "NV2 NV1 NV2 X   SYS SYS SYS NV1",
       "NV2 SYS SYS SYS X   NV1 NV1 NV2", "SYS NV2 SYS SYS NV1 X   NV2 NV1",
       "SYS SYS NV1 SYS NV1 NV2 X   NV2", "SYS SYS SYS NV1 NV2 NV1 NV2 X"]


def nvlink_box_topo() -> str:
    """``nvidia-smi topo -m`` of :func:`nvlink_box` (one NIC on P0)."""
    nic_rel = ["PIX", "PIX", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"]
    cols = [f"GPU{i}" for i in range(8)] + ["NIC0"]
    lines = ["\t" + "\t".join(cols + ["CPU Affinity", "NUMA Affinity"])]
    for i in range(8):
        cells = [c if c != "X" else " X " for c in _NV[i].split()] + [nic_rel[i]]
        aff = ["0-19,40-59", "0"] if i < 4 else ["20-39,60-79", "1"]
        lines.append("\t".join([f"GPU{i}"] + cells + aff))
    lines.append("\t".join(["NIC0"] + nic_rel + [" X "]))
    lines += ["", "Legend:", "", "  X    = Self", "  NV#  = Connection traversing a bonded "
              "set of # NVLinks", "", "NIC Legend:", "", "  NIC0: mlx5_0", ""]
    return "\n".join(lines)


def cpu_only(root: str | Path) -> Path:
    """A VM without GPUs: a virtio NIC on the root bus, no NUMA directory."""
    t = Tree(root)
    t.cpus_online("0-1")
    h = "pci0000:00"
    t.device(h, ["0000:00:00.0"], HOST, INTEL, 0x1237, speed=None, width=None)
    nic = t.device(h, ["0000:00:03.0"], ETH, VIRTIO, 0x1041, speed=None, width=None)
    virtio = nic / "virtio2"
    virtio.mkdir()
    t.net(virtio, "eth0", None)
    t.virtual_net("lo")
    return t.root


def build_all(out: str | Path) -> dict[str, Path]:
    """Every fixture under ``out``; returns name -> path (sysfs roots and the topo text)."""
    out = Path(out)
    paths = {
        "pcie_only": pcie_only(out / "pcie_only"),
        "nvlink_box": nvlink_box(out / "nvlink_box"),
        "nvlink_box_4nic": nvlink_box(out / "nvlink_box_4nic", nics_on=(0, 1, 2, 3)),
        "nvlink_box_2nic": nvlink_box(out / "nvlink_box_2nic", nics_on=(0, 2)),
        "cpu_only": cpu_only(out / "cpu_only"),
    }
    topo = out / "nvlink_box.topo.txt"
    topo.write_text(nvlink_box_topo())
    paths["nvlink_box_topo"] = topo
    return paths


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/make_sysfs_fixtures.py OUTDIR")
    for name, path in build_all(sys.argv[1]).items():
        print(f"{name}: {path}")
