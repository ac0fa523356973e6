"""Optional NVML reader: NVLink connections of the local NVIDIA GPUs.

Used when ``nvidia-ml-py`` (``pip install 'autotune[nvml]'``) and a driver are present;
otherwise :func:`read_nvlinks` returns None and the probes fall back to ``nvidia-smi topo
-m`` or to sysfs alone (no NVLink information).
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from autotune.probes.graph import GPU, KIND, NVLINK, NVSWITCH, nvlink_label
from autotune.probes.sysfs import normalize_bdf


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_nvlinks() -> tuple[list[str], dict[tuple[str, str], int]] | None:
    """``(gpu bus ids in NVML order, {(bus id, remote bus id): active links})`` or None.

    Remote bus ids that are not GPUs are NVSwitches.
    """
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver, no library: simply no NVML
        return None
    try:
        gpus: list[str] = []
        links: dict[tuple[str, str], int] = {}
        max_links = getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            bus = normalize_bdf(_text(pynvml.nvmlDeviceGetPciInfo(handle).busId))
            gpus.append(bus)
            for link in range(max_links):
                try:
                    if pynvml.nvmlDeviceGetNvLinkState(handle, link) != pynvml.NVML_FEATURE_ENABLED:
                        continue
                    remote = pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)
                except pynvml.NVMLError:
                    continue  # link not supported / not present
                key = (bus, normalize_bdf(_text(remote.busId)))
                links[key] = links.get(key, 0) + 1
        return gpus, links
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def merge_nvlinks(g: nx.Graph, nvml: tuple[list[str], dict[tuple[str, str], int]]) -> nx.Graph:
    """Add NVML's NVLinks to a sysfs graph, matching GPUs by PCI bus id."""
    _, links = nvml
    by_bdf = {d.get("bdf"): n for n, d in g.nodes(data=True) if d.get(KIND) == GPU}
    seen = set()
    for (a, b), n in sorted(links.items()):
        if a not in by_bdf:
            continue
        if b in by_bdf:
            pair = tuple(sorted((by_bdf[a], by_bdf[b])))
            if pair in seen:  # each GPU reports the same link from its side
                continue
            seen.add(pair)
            g.add_edge(*pair, kind=NVLINK, label=nvlink_label(n), links=n)
        else:
            sw = f"nvswitch:{b}"
            if sw not in g:
                g.add_node(sw, kind=NVSWITCH, label="nvswitch", bdf=b)
            g.add_edge(by_bdf[a], sw, kind=NVLINK, label=nvlink_label(n), links=n)
    g.graph["source"] = f"{g.graph.get('source', 'sysfs')}+nvml"
    return g
