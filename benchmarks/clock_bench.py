"""The user's clock: autotune against plain DDP on the emulated cluster, by case (root only).

One question in six cases (``benchmarks/userclock/``, one module each; issue 60 merged
the six scripts that asked it each its own way):

* ``job`` (the default): a whole job's wall time, from the start line to the last step,
  the session's start and tuning included: DDP, ``autotune.session(model)``,
  ``autotune.session(ddp_model)``; a little-to-win GPT, a tiny MLP, ``make demo``'s job;
* ``accuracy``: the time to a validation-loss target of real models on a slow link
  (lossless and lossy sessions against DDP);
* ``iteration``: one iteration's time after a tuning budget, against DDP's bucket sizes
  and the analytic optimum (with server hosts, fixed configurations);
* ``tuning``: the search's quality and cost against the best configuration of a sweep,
  fixed from the start;
* ``retune``: a link change under a locked session: how fast it notices and recovers;
* ``hook``: DDP against DDP with autotune's comm hook, per iteration after tuning (a
  per-flow cap, server hosts, nothing to win, two workers a host).

Every case trains through one rank program (``userclock/rank.py``: arms run one after
another in one world, every step timed the same way) and reports the **speed-up over
DDP** (DDP's time over autotune's, above 1 faster) with medians and their min-max spread;
JSON (and a PNG where the case draws one) under benchmarks/results/clock/.

    sudo .venv/bin/python benchmarks/clock_bench.py --help
    sudo .venv/bin/python benchmarks/clock_bench.py job --runs 3 [--unknown-length]
    sudo .venv/bin/python benchmarks/clock_bench.py accuracy --quick
    sudo .venv/bin/python benchmarks/clock_bench.py iteration --model resnet50
    sudo .venv/bin/python benchmarks/clock_bench.py tuning
    sudo .venv/bin/python benchmarks/clock_bench.py retune --scenarios cut
    sudo .venv/bin/python benchmarks/clock_bench.py hook --cases servers

A command without a case is the ``job`` case (``clock_bench.py --model mlp`` as before).
Every rank is this file again (``--rank SPEC``); a rank that fails stops the benchmark
with its name and output; every wait is bounded (``--rank-timeout``, ``--timeout``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from benchlib import RESULTS, add_cluster_args, report, require_emulator  # noqa: E402

CASES = ("job", "accuracy", "iteration", "tuning", "retune", "hook")


def case_module(name: str):
    return importlib.import_module(f"userclock.{name}")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="case", metavar="CASE")
    for name in CASES:
        mod = case_module(name)
        first = " ".join(mod.__doc__.split("\n\n")[0].split())
        p = sub.add_parser(name, help=first.split(": ", 1)[-1], description=mod.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        add_cluster_args(p)
        p.add_argument("--seed", type=int, default=0, help="run i uses seed + i")
        p.add_argument("--rank-timeout", type=float, default=120.0,
                       help="seconds any wait of a rank may take")
        p.add_argument("--timeout", type=float, default=1800.0,
                       help="seconds a launch may take beyond its arms' own seconds")
        p.add_argument("--verbose", action="store_true", help="echo every rank's output")
        p.add_argument("--json", type=Path, default=None,
                       help="where the JSON goes (default: under benchmarks/results/)")
        p.add_argument("--plot", type=Path, default=None, help="where the PNG goes")
        mod.add_args(p)
    return ap


def with_case(argv: list[str]) -> list[str]:
    """``argv`` with its case: a command line that names none is the ``job`` case's."""
    return argv if argv[:1] and argv[0] in CASES + ("-h", "--help") else ["job", *argv]


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--rank"]:  # a rank of a launch (userclock/rank.py)
        from userclock import rank

        rank.main(json.loads(argv[1]))
        return
    ap = parser()
    a = ap.parse_args(with_case(argv))
    mod = case_module(a.case)
    mod.check(ap, a)
    if a.json is None and mod.JSON:
        a.json = RESULTS / mod.JSON
    plot = getattr(mod, "plot", None)
    if plot is not None and a.plot is None:
        a.plot = a.json.with_suffix(".png")
    require_emulator(f"clock_bench {a.case}")
    report(mod.run(a), mod.print_table, a.json, plot, a.plot)


if __name__ == "__main__":
    main()
