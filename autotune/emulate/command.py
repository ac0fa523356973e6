"""``autotune emulate`` / ``python -m autotune.emulate``: the emulated cluster for people.

``up`` leaves a cluster standing (until ``down``), ``run`` runs a command as a job on a
standing or a throw-away cluster, ``measure`` reports B, ``list`` and ``cleanup`` deal
with what is there. Everything needs root.
"""

from __future__ import annotations

import sys

import click

_rate = click.option("--rate", default="200mbit", show_default=True,
                     help="NIC rate of each host, each way (tc units: kbit, mbit, gbit).")
_hosts = click.option("--hosts", default=3, show_default=True, type=click.IntRange(1, 200))
_flow_cap = click.option("--flow-cap", default=None, help="Cap per TCP flow, e.g. 50mbit.")
_latency = click.option("--latency", default=None, help="One-way delay per hop, e.g. 2ms (needs netem).")


def _fail(e: Exception) -> None:
    raise click.ClickException(str(e))


def _suggesting_group() -> type[click.Group]:
    from autotune.cli import SuggestingGroup

    return SuggestingGroup


@click.group("emulate", cls=_suggesting_group(),
             context_settings={"help_option_names": ["-h", "--help"]})
def emulate() -> None:
    """An emulated cluster on this machine: one network namespace per host (root only).

    \b
    Examples:
      sudo autotune emulate measure --rate 300mbit
      sudo autotune emulate run --hosts 4 --rate 200mbit -- python train.py
      sudo autotune emulate cleanup
    """


@emulate.command()
@_hosts
@_rate
@_flow_cap
@_latency
def up(hosts: int, rate: str, flow_cap: str | None, latency: str | None) -> None:
    """Bring a cluster up and leave it standing; prints its name.

    \b
    Examples:
      sudo autotune emulate up --hosts 4 --rate 200mbit
      sudo autotune emulate up --hosts 3 --flow-cap 50mbit --latency 2ms
    """
    from autotune.emulate import Cluster, EmulatorError

    try:
        c = Cluster(hosts, rate, flow_cap=flow_cap, latency=latency).up(persistent=True)
    except EmulatorError as e:
        _fail(e)
    click.echo(c.describe())
    click.echo(c.name)


@emulate.command()
@click.argument("name")
def down(name: str) -> None:
    """Tear down the cluster NAME (kills its processes).

    \b
    Example:
      sudo autotune emulate down CLUSTER
    """
    from autotune.emulate import Cluster, EmulatorError

    try:
        c = Cluster.attach(name)
    except EmulatorError:
        from autotune.emulate import cleanup

        removed = cleanup(name, include_live=True, include_persistent=True)
        click.echo(f"removed {len(removed)} namespaces of {name}")
        return
    failed = c.down()
    if failed:
        _fail(RuntimeError(f"could not remove {failed}"))
    click.echo(f"{name} is down")


@emulate.command("list")
def list_() -> None:
    """List emulated clusters (by namespace).

    \b
    Example:
      sudo autotune emulate list
    """
    from autotune.emulate.netns import list_netns

    names = sorted({n.rsplit("-", 1)[0] for n in list_netns() if "-" in n})
    if not names:
        click.echo("no emulated clusters (start one with: autotune emulate up --hosts N)")
    for n in names:
        click.echo(n)


@emulate.command()
@click.option("--all", "everything", is_flag=True,
              help="Also remove clusters made by `up` and ones whose owner still runs.")
def cleanup(everything: bool) -> None:
    """Remove leftovers of crashed runs (namespaces, processes, files).

    \b
    Examples:
      sudo autotune emulate cleanup
      sudo autotune emulate cleanup --all
    """
    from autotune.emulate import cleanup as do_cleanup

    removed = do_cleanup(include_live=everything, include_persistent=everything)
    click.echo(f"removed {len(removed)} namespaces" + (": " + " ".join(removed) if removed else ""))


@emulate.command(context_settings={"ignore_unknown_options": True})
@click.option("--name", default=None, help="Run on this standing cluster (from `up`).")
@_hosts
@_rate
@_flow_cap
@_latency
@click.option("--workers", "-n", default=None, type=int, help="Worker ranks (default: all hosts).")
@click.option("--servers", "-k", default=0, show_default=True, help="Server ranks, on the next hosts.")
@click.option("--timeout", default=600.0, show_default=True, help="Seconds before all ranks are killed.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(name: str | None, hosts: int, rate: str, flow_cap: str | None, latency: str | None,
        workers: int | None, servers: int, timeout: float, command: tuple[str, ...]) -> None:
    """Run COMMAND as one rank per host (torchrun's environment, gloo on eth0).

    \b
    Examples:
      autotune emulate run --hosts 2 -- python train.py
      autotune emulate run --hosts 4 --servers 1 --rate 1gbit -- python train.py
      autotune emulate run --name CLUSTER -- python train.py
    """
    from autotune.emulate import Cluster, EmulatorError

    try:
        if name:
            c = Cluster.attach(name)
            res = c.launch(list(command), workers=workers or len(c.hosts) - servers,
                           servers=servers, timeout_s=timeout, echo=sys.stdout)
        else:
            with Cluster(hosts, rate, flow_cap=flow_cap, latency=latency) as c:
                res = c.launch(list(command), workers=workers or hosts - servers, servers=servers,
                               timeout_s=timeout, echo=sys.stdout)
    except EmulatorError as e:
        _fail(e)
    for r in res.ranks:
        click.echo(f"rank {r.rank} ({r.role}, host {r.host}): "
                   f"{'killed' if r.returncode is None else f'exit {r.returncode}'}")
    if res.timed_out:
        click.echo(f"timed out after {timeout:g} s", err=True)
    sys.exit(0 if res.ok else 1)


@emulate.command()
@_rate
@_flow_cap
@click.option("--bytes", "nbytes", default=8 << 20, show_default=True)
@click.option("--repeats", default=3, show_default=True)
@click.option("--streams", default=1, show_default=True)
@click.option("--duplex", is_flag=True, help="Both directions at once.")
def measure(rate: str, flow_cap: str | None, nbytes: int, repeats: int, streams: int,
            duplex: bool) -> None:
    """Measure B between two hosts over torch.distributed (gloo send/recv).

    \b
    Examples:
      sudo autotune emulate measure --rate 300mbit
      sudo autotune emulate measure --flow-cap 50mbit --streams 4 --duplex
    """
    from autotune.emulate import Cluster, EmulatorError, measure_bandwidth

    try:
        with Cluster(2, rate, flow_cap=flow_cap) as c:
            m = measure_bandwidth(c, 0, 1, nbytes=nbytes, repeats=repeats, streams=streams,
                                  duplex=duplex)
    except EmulatorError as e:
        _fail(e)
    click.echo(f"B = {m.bytes_per_s / 1e6:.2f} MB/s = {m.ratio:.3f} x the {rate} NIC "
               f"({m.streams} stream(s){', duplex' if duplex else ''}; samples "
               + ", ".join(f"{s:.3f}s" for s in m.samples_s) + ")")
