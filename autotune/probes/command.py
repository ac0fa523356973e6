"""``autotune probe``: this machine's devices as a tree and the S_n/S_g verdict."""

from __future__ import annotations

import json
from pathlib import Path

import click
import networkx as nx

from autotune.outpath import OutFile
from autotune.probes.classify import Verdict, classify
from autotune.probes.facts import machine_graph
from autotune.probes.graph import (
    GPU, HOST_BRIDGE, KIND, LABEL, MACHINE, NIC, NUMA, NVLINK, PCIE_SWITCH, ROOT, child_key,
    to_json, tree_parents)
from autotune.probes.nvsmi import NvsmiParseError
from autotune.probes.sysfs import SysfsError


def _describe(g: nx.Graph, n: str) -> str:
    d = g.nodes[n]
    kind = d.get(KIND)
    if kind == MACHINE:
        return f"[bold]machine[/] {g.graph.get('hostname') or ''} [dim]({g.graph.get('source')})[/]"
    if kind == NUMA:
        return f"[magenta]NUMA {d.get('numa')}[/] cpus {d.get('cpus') or '?'}"
    if kind == HOST_BRIDGE:
        return f"root complex {d.get('bus', n.split(':', 1)[1])}"
    if kind == PCIE_SWITCH:
        what = {True: "PCIe switch", False: "root port", None: "PCIe switch/port"}[
            d.get("switched")]
        port = d.get("root_port")
        return f"[yellow]{what}[/]" + (f" {port}" if port else f" {n}")
    if kind == GPU:
        extra = " ".join(x for x in (d.get("bdf"), d.get("vendor"), d.get("pci_id")) if x)
        return f"[green]GPU {d.get('index')}[/] {extra}"
    if kind == NIC:
        names = ", ".join(x for x in (d.get("ibdev"), d.get("netdev")) if x) or d.get("name")
        speed = f" {d['speed_gbps']:g} Gbit/s" if d.get("speed_gbps") else ""
        return f"[red]NIC {names}[/]{speed}" + (f" {d['bdf']}" if d.get("bdf") else "")
    return f"{kind} {n}"


def render_tree(g: nx.Graph):
    """The machine graph as a rich Tree (PCIe links on the child lines, NVLinks last)."""
    from rich.tree import Tree

    parents = tree_parents(g)
    children: dict = {}
    for n, p in parents.items():
        if p is not None:
            children.setdefault(p, []).append(n)
    root = Tree(_describe(g, ROOT))

    def add(branch, node) -> None:
        for c in sorted(children.get(node, []), key=child_key(g)):
            label = g.edges[node, c].get(LABEL, "")
            link = f" [dim]{label}[/]" if label.startswith("pcie:") and label != "pcie:root" \
                else ""
            add(branch.add(_describe(g, c) + link), c)

    add(root, ROOT)
    nv = [(a, b, d) for a, b, d in g.edges(data=True) if d.get(KIND) == NVLINK]
    if nv:
        branch = root.add(f"[cyan]NVLink[/] ({len(nv)} connections)")
        for a, b, d in sorted(nv, key=lambda e: (e[0], e[1])):
            branch.add(f"{a} ↔ {b}  {d.get('links', '?')} link(s)")
    return root


def render_verdict(v: Verdict) -> str:
    roots = ",".join(str(r) for r in v.root_candidates) or "-"
    rule = {0: "-", 1: "1 (reduce + broadcast)", 2: "2 (reduce-scatter + all-gather)"}[v.rule]
    return (f"[bold]S_n[/]={v.S_n}  [bold]S_g[/]={v.S_g}  GPUs={v.n_gpus}  NICs={v.n_nics}  "
            f"NVLink={'yes' if v.nvlink else 'no'}\n"
            f"rule {rule}  →  intra=[bold]{v.intra}[/]  root candidates: {roots}"
            f"{'  (CPU-assisted)' if v.cpu_assisted else ''}\n[dim]{v.reason}[/]")


@click.command("probe")
@click.option("--json", "as_json", is_flag=True, help="Print the graph and verdict as JSON.")
@click.option("--sysfs", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Read this saved sysfs tree (the directory holding bus/) instead of /sys.")
@click.option("--nvidia-smi", "nvidia_smi",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Read this saved `nvidia-smi topo -m` output (alone, or for the NVLinks "
                   "of --sysfs).")
@click.option("--draw", type=OutFile(),
              help="Also draw the graph to this image file (needs matplotlib).")
def probe(as_json: bool, sysfs: Path | None, nvidia_smi: Path | None, draw: Path | None) -> None:
    """Show this machine's GPUs, NICs and PCIe/NVLink topology and the S_n/S_g verdict.

    Without options: /sys, plus NVLinks from NVML (nvidia-ml-py) or `nvidia-smi topo -m`.

    \b
    Examples:
      autotune probe
      autotune probe --json
      autotune probe --sysfs saved/ --nvidia-smi topo.txt --draw machine.png
    """
    try:
        g = machine_graph(sysfs, nvidia_smi, run_smi=True)
    except (SysfsError, NvsmiParseError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    verdict = classify(g)
    if draw is not None:
        from autotune.probes.draw import DrawError, draw_graph
        try:
            draw_graph(g, draw, verdict)
        except DrawError as exc:
            raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps({"graph": to_json(g), "verdict": verdict.to_dict()}, indent=1,
                              sort_keys=True))
        return
    from rich.console import Console
    from rich.panel import Panel

    console = Console()
    console.print(render_tree(g))
    console.print(Panel(render_verdict(verdict), title="intra-machine verdict (BytePS §4.2.3)",
                        expand=False))
    if draw is not None:
        console.print(f"graph drawn to {draw}")
