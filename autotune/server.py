"""A dedicated Summation Service process: ``python -m autotune.server``.

Joins the ``torch.distributed`` world from the environment (``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``, as set by ``autotune launch`` or ``torchrun``), then
serves whatever plan the workers use, one iteration per ``sync``, until the leader's
``sync(stop=True)``. It sums; it never runs an optimizer (BytePS §5).

``-h``/``--help`` prints what it is and the environment it needs; a missing or malformed
environment is a usage error (exit code 2, no traceback) before torch is imported.

``AUTOTUNE_TRACE=DIR`` (diagnosis): the server records its operations
(:mod:`autotune.runtime.data.trace`) and writes them to ``DIR/rank<r>.json`` when it stops,
beside the workers' traces, for ``benchmarks/timeline.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Mapping

from autotune.runtime.config import ConfigError
from autotune.runtime.errors import RuntimeFault, ServerLost


def serve(rt: Any) -> int:
    """Loop ``rt.sync()`` / ``rt.serve_iteration()`` until stopped; returns iterations served.

    A :class:`ConfigError` or recoverable :class:`RuntimeFault` from ``sync`` was raised
    on every rank alike; the workers decide what comes next, so the server keeps serving.
    :class:`ServerLost` (a server stopped, and the workers went on without servers) ends
    the loop: this server is no longer needed.
    """
    served = 0
    while True:
        try:
            rt.sync()
            if rt.stopped:
                return served
            rt.serve_iteration()
        except ServerLost as e:
            print(f"autotune server rank {rt.info.rank}: leaving, {e}", file=sys.stderr,
                  flush=True)
            return served
        except ConfigError:
            continue
        except RuntimeFault as e:
            if e.recoverable:
                continue
            raise
        served += 1


def serve_to_the_end(rt: Any) -> None:
    """A server rank's whole life after its runtime's bootstrap: :func:`serve`, then shut
    the runtime down and, once it ended cleanly, destroy the ``torch.distributed`` world
    this process joined, so that no gloo thread of the process is left to the
    interpreter's exit (a process group finalised there aborts the process: ``terminate
    called without an active exception``, PyTorch issue #65237). Returns once the
    process may exit; what ``serve`` raises (a worker's failure) propagates, with the
    runtime shut down and the groups left to the operating system."""
    import torch.distributed as dist

    try:
        serve(rt)
    except BaseException as exc:
        rt.shutdown(failed=exc)
        raise
    rt.shutdown()
    if dist.is_initialized():
        dist.destroy_process_group()


USAGE = """\
A Summation Service process of an autotune job: it joins the job's torch.distributed
world, then sums the workers' gradient chunks, one iteration per sync, until the leader
(the first worker) stops it. It never runs an optimizer. Start it with
`autotune launch --servers K ...` or `torchrun ... -m autotune.server`, not by hand.

environment (set by autotune launch or torchrun):
  RANK              this process's rank, 0 <= RANK < WORLD_SIZE
  WORLD_SIZE        workers + servers of the job
  MASTER_ADDR       host of the rendezvous store
  MASTER_PORT       its port
  AUTOTUNE_TIMEOUT  seconds a communication wait may take (default 300; the
                    leader's value wins once the job has started)
  AUTOTUNE_MACHINE  the machine this process counts as (default: the hostname)

It first waits for all WORLD_SIZE ranks to join at MASTER_ADDR:MASTER_PORT, then waits
in each sync for the workers (as long as they compute), and exits 0 when the leader's
sync(stop=True) ends the job. See docs/runtime.md.
"""

REQUIRED_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog="python -m autotune.server", description=USAGE,
        formatter_class=argparse.RawDescriptionHelpFormatter)


def _check_env(parser: argparse.ArgumentParser, env: Mapping[str, str]) -> float:
    """The timeout; ``parser.error`` (exit code 2, no traceback) for a missing or bad
    distributed environment."""
    missing = [k for k in REQUIRED_ENV if not env.get(k)]
    if missing:
        parser.error(f"missing environment variable{'s' if len(missing) > 1 else ''} "
                     f"{', '.join(missing)}: a server joins a torch.distributed job; start it "
                     "with `autotune launch --servers K ...` or torchrun (see --help)")
    ints = {}
    for key in ("RANK", "WORLD_SIZE", "MASTER_PORT"):
        try:
            ints[key] = int(env[key])
        except ValueError:
            parser.error(f"{key}={env[key]!r} is not an integer")
    if not 0 <= ints["RANK"] < ints["WORLD_SIZE"]:
        parser.error(f"RANK={ints['RANK']} must be in 0..WORLD_SIZE-1 (WORLD_SIZE={ints['WORLD_SIZE']})")
    if not 0 < ints["MASTER_PORT"] < 65536:
        parser.error(f"MASTER_PORT={ints['MASTER_PORT']} is not a TCP port")
    text = env.get("AUTOTUNE_TIMEOUT", "300")
    try:
        timeout = float(text)
    except ValueError:
        timeout = float("nan")
    if not timeout > 0 or timeout == float("inf"):
        parser.error(f"AUTOTUNE_TIMEOUT={text!r} must be a positive number of seconds")
    return timeout


def main(argv: list[str] | None = None) -> int:
    """``python -m autotune.server [-h]``: check the environment, join, serve, exit 0."""
    parser = _parser()
    parser.parse_args(argv)  # only -h/--help; anything else is a usage error
    timeout = _check_env(parser, os.environ)

    import torch.distributed as dist

    from autotune.errors import install_excepthook
    from autotune.runtime import Runtime
    from autotune.runtime.data import trace

    dist.init_process_group("gloo")
    install_excepthook()  # a worker's failure ends the server with one line naming it
    rt = Runtime.bootstrap(timeout=timeout, role="server")
    folder = os.environ.get("AUTOTUNE_TRACE")
    if folder:
        trace.start()
    try:
        serve_to_the_end(rt)
    finally:
        if folder:
            trace.dump(folder, rt.info.rank, "server")
    return 0


if __name__ == "__main__":
    sys.exit(main())
