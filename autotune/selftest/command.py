"""The ``autotune selftest`` command (registered in :mod:`autotune.cli`; also
``python -m autotune.selftest``): checks the options, then runs this rank's part inside a
job (:func:`autotune.selftest.rank.run_rank`, or under ``--ddp``
:func:`autotune.selftest.rank_ddp.run_ddp_rank`) or starts the job on this machine
(``autotune launch``'s machinery). A :class:`~autotune.selftest.SelftestError` becomes one
line on stderr and exit code 2."""

from __future__ import annotations

import os
import sys
from typing import Any, Mapping

import click

from autotune.outpath import OutFile
from autotune.selftest import SelftestError
from autotune.selftest.sweep import DTYPES, MiB, shapes

DEFAULT_TIMEOUT = 60.0
USAGE_EXIT = 2  # click's exit code for bad usage


class _OneLine(click.ClickException):
    """How the command reports a :class:`SelftestError`: ``Error: <cause>``, exit 2."""

    exit_code = USAGE_EXIT


def _parse_dtypes(text: str) -> list[str]:
    names = [d.strip() for d in text.split(",") if d.strip()]
    bad = [d for d in names if d not in DTYPES]
    if not names or bad:
        raise SelftestError(f"--dtypes: {', '.join(bad) or 'none given'}; choose from "
                            f"{', '.join(DTYPES)}")
    return names


def _in_job() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def _forward(opts: Mapping[str, Any]) -> list[str]:
    args = ["--size", str(opts["size"]), "--tensors", str(opts["tensors"]),
            "--iterations", str(opts["iterations"]), "--dtypes", ",".join(opts["dtypes"]),
            "--device", opts["device"], "--timeout", str(opts["timeout"]),
            "--seed", str(opts["seed"])]
    if opts["quick"]:
        args.append("--quick")
    if opts["lossy"]:
        args.append("--lossy")
    if opts["ddp"]:
        args.append("--ddp")
    if opts.get("json_out"):
        args += ["--json-out", os.path.abspath(opts["json_out"])]
    return args


@click.command("selftest")
@click.option("--size", type=float, default=4.0, show_default=True,
              help="MiB of gradients in all.")
@click.option("--tensors", type=int, default=24, show_default=True,
              help="Parameters (tensors) the gradients are split into, of model-like sizes.")
@click.option("--iterations", type=int, default=5, show_default=True,
              help="Timed iterations per configuration (the median is shown).")
@click.option("--quick", is_flag=True, help="A handful of configurations instead of the sweep.")
@click.option("--lossy", is_flag=True,
              help="Check the lossy codecs too (fp16, bf16, topk, randomk, onebit, powersgd).")
@click.option("--ddp", is_flag=True,
              help="Check and time DDP's comm hook (autotune inside "
                   "DistributedDataParallel) against plain DDP instead of the native "
                   "runtime; workers only.")
@click.option("--json", "as_json", is_flag=True,
              help="Print every result as JSON on standard output (the table and the "
                   "job's lines go to standard error).")
@click.option("--json-out", "json_path", type=OutFile(path_type=None), default=None,
              metavar="FILE", help="Also write every result as JSON to this file (the leader).")
@click.option("--dtypes", default="float32", show_default=True,
              help=f"Gradient dtypes, comma-separated, from: {', '.join(DTYPES)}; in turn.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
              show_default=True, help="Where the gradients live (auto: CUDA if present).")
@click.option("--timeout", type=float, default=DEFAULT_TIMEOUT, show_default=True,
              help="Seconds any communication wait may take.")
@click.option("--seed", type=int, default=0, show_default=True, help="Shapes and values.")
@click.option("--workers", "-n", type=int, default=None,
              help="Outside a job: start this many workers on this machine (default 2).")
@click.option("--servers", "-k", type=int, default=None,
              help="Outside a job: and this many servers (default 1; with --ddp 0).")
@click.option("--machines", "-m", type=int, default=None,
              help="Outside a job: emulate this many machines (see autotune launch).")
def selftest(size: float, tensors: int, iterations: int, quick: bool, lossy: bool, ddp: bool,
             as_json: bool, json_path: str | None, dtypes: str, device: str, timeout: float, seed: int,
             workers: int | None, servers: int | None, machines: int | None) -> None:
    """Check the runtime's averages against all_reduce and time them against DDP.

    Inside a job (torchrun, autotune launch: RANK and WORLD_SIZE set) this process is one
    rank: servers serve, workers sweep the configurations, the leader prints the table.
    Outside one it starts the job on this machine (--workers, --servers, --machines).
    With --ddp every worker runs real DDP, with autotune's comm hook and without (one GPU
    check: autotune selftest --ddp --device cuda -n 2); with --servers and --machines the
    hook's push/pull and intra-machine step too. Exit code 1 if any configuration
    failed, 2 for an option it cannot run with. See docs/gpu.md.

    \b
    Examples:
      autotune selftest -n 4 -k 2 --machines 2 --dtypes float32,bfloat16
      autotune selftest --ddp --device cuda -n 2 --json-out selftest.json
      autotune selftest --ddp -n 4 -k 1 --machines 2 --quick
    """
    try:
        _run(size, tensors, iterations, quick, lossy, ddp, as_json, json_path, dtypes, device,
             timeout, seed, workers, servers, machines)
    except SelftestError as exc:
        raise _OneLine(str(exc)) from None


def _run(size: float, tensors: int, iterations: int, quick: bool, lossy: bool, ddp: bool,
         as_json: bool, json_path: str | None, dtypes: str, device: str, timeout: float, seed: int,
         workers: int | None, servers: int | None, machines: int | None) -> None:
    """The command's work; exits with the job's code, raises :class:`SelftestError`."""
    if size <= 0:
        raise SelftestError(f"--size must be > 0 MiB, got {size}")
    if iterations < 1:
        raise SelftestError(f"--iterations must be >= 1, got {iterations}")
    if timeout <= 0:
        raise SelftestError(f"--timeout must be > 0, got {timeout}")
    opts = {"size": size, "tensors": tensors, "iterations": iterations, "quick": quick,
            "lossy": lossy, "ddp": ddp, "json": as_json, "json_out": json_path, "dtypes": _parse_dtypes(dtypes),
            "device": device, "timeout": timeout, "seed": seed}
    shapes(int(size * MiB), tensors)  # (checks --tensors)
    if _in_job():
        if workers is not None or servers is not None or machines is not None:
            raise SelftestError("--workers/--servers/--machines start a job; inside one "
                                "(RANK and WORLD_SIZE are set) the job's own shape is used")
        if ddp:
            from autotune.selftest.rank_ddp import run_ddp_rank as run_rank
        else:
            from autotune.selftest.rank import run_rank
        sys.exit(run_rank(opts))
    from autotune.launch import check_world, run_job

    n = 2 if workers is None else workers
    k = (0 if ddp else 1) if servers is None else servers
    check_world(n, k, machines)
    if not as_json:
        sys.exit(run_job(["-m", "autotune.selftest", *_forward(opts)], n, k, machines, 30.0))
    # --json: the job's lines (the table among them) go to stderr; the leader writes the
    # result to a file (--json-out's, or a temporary one) and it is printed here, alone on
    # stdout, so that other ranks' lines cannot mix into it
    import tempfile

    with tempfile.TemporaryDirectory(prefix="autotune-selftest-") as tmp:
        path = json_path or os.path.join(tmp, "selftest.json")
        code = run_job(["-m", "autotune.selftest", *_forward({**opts, "json_out": path})],
                       n, k, machines, 30.0, out=sys.stderr)
        if os.path.exists(path):
            with open(path) as fh:
                click.echo(fh.read().rstrip("\n"))
    sys.exit(code)


def main() -> None:
    """``python -m autotune.selftest``."""
    selftest()
