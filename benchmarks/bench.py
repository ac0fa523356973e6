"""One way to run the benchmarks: list them by family, run a family or one benchmark, JSON out.

    .venv/bin/python benchmarks/bench.py list                   # families, benchmarks, what each measures
    .venv/bin/python benchmarks/bench.py run store              # a family, with each benchmark's defaults
    sudo .venv/bin/python benchmarks/bench.py run clock --quick  # short runs (minutes, not hours)
    .venv/bin/python benchmarks/bench.py run tuner/tuner_bench -- --suite unseen --seeds 8
    .venv/bin/python benchmarks/bench.py run hook --dry-run      # the commands, not run

The families (issue 60): ``runtime`` (the gradient runtime's communication against the
analytic optimum, codecs, switches), ``tuner`` (the Tuner's choices against the optimum and
the stock methods, its model of the cluster), ``clock`` (the user's clock: autotune against
plain DDP, one script, ``clock_bench.py``, in five cases: a whole job, the time to a target
loss, one iteration after tuning, the search against a sweep, a re-tune), ``hook`` (DDP with
autotune's comm hook against DDP alone: the script's sixth case, ``clock_bench.py hook``, and
the hook's own overhead) and ``store`` (the results store's look-ups).

``run`` starts each benchmark of the family as its own process, one after another (alone on
the machine: a benchmark is never timed beside another), each bounded by ``--timeout``
(default: three times its usual length, at least 10 minutes); each writes its JSON to
``OUT/<name>.json`` (every benchmark takes ``--json PATH``), and ``OUT/harness.json`` says
what ran: each command, its exit status, its wall time, its JSON. ``OUT`` is
``results/<family>/<date>/`` unless ``--out`` says otherwise. A benchmark that needs the
emulated cluster is skipped with the reason where it cannot run (not root, no ``tc``).
Arguments after ``--`` go to every benchmark run. ``RESULTS.md`` keeps each claim's latest
figures; ``notes/`` the dated history.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from benchlib import RESULTS  # noqa: E402

FAMILIES = {
    "runtime": "the gradient runtime: communication against the analytic optimum, codecs, "
               "switches, its CPU",
    "tuner": "the Tuner: its choices against the optimum and the stock methods, its model of "
             "the cluster, the loss test's prediction",
    "clock": "the user's clock: autotune against plain DDP, a whole job, one iteration after "
             "tuning, the time to a target loss, a re-tune",
    "hook": "DDP with autotune's comm hook against DDP alone",
    "store": "the results store: finding the nearest earlier jobs",
}

#: Files in benchmarks/ that are not benchmarks: the pieces the benchmarks share, the tool
#: that records the measured tables, the trace reader, and this harness.
NOT_BENCHMARKS = {
    "benchlib": "shared pieces: the cluster, the link's B, JSON and figures",
    "objectives": "the analytic step-time objectives of the tuner benchmark",
    "measured": "the measured tables, replayed as objectives",
    "unseen": "step-time models the prior was not built from",
    "record_tables": "records the measured tables (root; benchmarks/data/tables)",
    "timeline": "reads a push/pull job's traces into a per-stage timeline",
    "bench": "this harness",
}


@dataclass(frozen=True)
class Bench:
    """One benchmark: its file (``benchmarks/<name>.py``) and, for a script of several cases,
    the case (``clock_bench.py job``; its docstring in ``benchmarks/userclock/<case>.py``);
    its family, whether it needs the emulated cluster, about how long its defaults take on
    the 2-core machine, the arguments of a short run, and the launcher it runs under
    (``autotune launch -n 2`` for the ones that are themselves a rank)."""

    name: str
    family: str
    root: bool
    minutes: float
    quick: tuple[str, ...] = ()
    launch: tuple[str, ...] = ()
    case: str = ""

    @property
    def key(self) -> str:
        """How ``family/KEY`` selects it, and its JSON's name: the case, or the file."""
        return self.case or self.name

    @property
    def path(self) -> Path:
        return HERE / f"{self.name}.py"

    @property
    def doc_path(self) -> Path:
        """The file whose docstring says what it measures."""
        return HERE / "userclock" / f"{self.case}.py" if self.case else self.path

    def what(self) -> str:
        """The first sentence of its docstring: what it measures."""
        doc = ast.get_docstring(ast.parse(self.doc_path.read_text())) or ""
        first = " ".join(doc.split("\n\n")[0].split())
        return first.split(". ")[0].rstrip(".") + "." if first else ""

    def command(self, json_path: Path, *, quick: bool, extra: list[str]) -> list[str]:
        launcher = ([str(Path(sys.executable).with_name("autotune")), *self.launch]
                    if self.launch else [sys.executable])
        return [*launcher, str(self.path), *((self.case,) if self.case else ()),
                *(self.quick if quick else ()), *extra, "--json", str(json_path)]


BENCHES = (
    Bench("goodput_bench", "runtime", True, 20, ("--repeats", "1", "--settings", "1x256K")),
    Bench("cluster_bench", "runtime", True, 10, ("--repeats", "1")),
    Bench("comm_bench", "runtime", False, 10, ("--model", "resnet50", "--repeats", "1")),
    Bench("codec_bench", "runtime", True, 20, ("--repeats", "1")),
    Bench("switch_bench", "runtime", True, 15, ("--machines", "2")),
    Bench("grad_views_bench", "runtime", False, 3, ("--mib", "16", "--iterations", "4"),
          launch=("launch", "-n", "2", "-k", "1")),
    Bench("goodput_overhead_bench", "runtime", True, 10, ("--repeats", "1")),
    Bench("residual_bench", "runtime", False, 6, ("--models", "cnn", "--seeds", "1")),
    Bench("tuner_bench", "tuner", False, 15,
          ("--suite", "unseen", "--seeds", "1", "--methods", "tuner", "--no-warm")),
    Bench("model_bench", "tuner", False, 2, ("--n", "8", "--seeds", "2")),
    Bench("sim_calibration", "tuner", True, 4, ("--repeats", "1")),
    Bench("scale_table", "tuner", False, 70,
          ("--models", "resnet50", "--gpus", "256", "--nics", "100", "--caps", "none")),
    Bench("loss_test_bench", "tuner", False, 25, ("--models", "cnn", "--seeds", "1")),
    Bench("replay_check", "tuner", True, 6, ("--seeds", "1", "--budget", "40")),
    Bench("clock_bench", "clock", True, 5, ("--model", "mlp", "--steps", "300", "--runs", "1"),
          case="job"),
    Bench("clock_bench", "clock", True, 30, ("--quick",), case="accuracy"),
    Bench("clock_bench", "clock", True, 20, ("--repeats", "1"), case="iteration"),
    Bench("clock_bench", "clock", True, 20, ("--repeats", "1"), case="tuning"),
    Bench("clock_bench", "clock", True, 10, ("--scenarios", "cut"), case="retune"),
    Bench("clock_bench", "hook", True, 25, ("--cases", "uncapped", "--repeats", "1"),
          case="hook"),
    Bench("hook_overhead_bench", "hook", False, 3,
          ("--device", "cpu", "--batch", "2", "--iterations", "2"), launch=("launch", "-n", "2")),
    Bench("store_bench", "store", False, 2, ("--runs", "100", "--repeats", "1")),
)


def select(what: str) -> list[Bench]:
    """A family's benchmarks, or one as ``family/name`` (a case of a script by its case's
    name, every case by the script's); a name that is neither is an error that lists the
    choices."""
    family, _, name = what.partition("/")
    chosen = [b for b in BENCHES
              if b.family == family and (not name or name in (b.key, b.name))]
    if not chosen:
        raise SystemExit(f"bench.py: no benchmark {what!r}: a family ({', '.join(FAMILIES)}) "
                         f"or family/name (bench.py list)")
    return chosen


def unavailable(bench: Bench) -> str | None:
    """Why ``bench`` cannot run here, or None."""
    if not bench.root:
        return None
    from autotune.emulate import unavailable_reason

    return unavailable_reason() or None


def run(benches: list[Bench], out: Path, *, quick: bool, extra: list[str], dry: bool,
        timeout: float | None) -> dict:
    """Run ``benches`` one after another; what ran, as ``OUT/harness.json`` holds it."""
    done = []
    for b in benches:
        json_path = out / f"{b.key}.json"
        cmd = b.command(json_path, quick=quick, extra=extra)
        row = {"benchmark": b.key, "family": b.family, "command": cmd, "json": str(json_path)}
        reason = unavailable(b)
        if dry:
            print(" ".join(cmd) + (f"   # skipped here: {reason}" if reason else ""))
            continue
        if reason:
            print(f"bench.py: {b.key} skipped: {reason}", file=sys.stderr)
            done.append({**row, "skipped": reason})
            continue
        limit = timeout or max(600.0, 3 * 60 * b.minutes)
        print(f"bench.py: {b.key} ({'quick' if quick else 'defaults'}, at most "
              f"{limit / 60:.0f} min): {' '.join(cmd)}", file=sys.stderr, flush=True)
        started = time.perf_counter()
        try:
            rc: int | None = subprocess.run(cmd, cwd=HERE.parent, timeout=limit).returncode
        except subprocess.TimeoutExpired:
            rc = None
        wall = time.perf_counter() - started
        done.append({**row, "rc": rc, "wall_s": round(wall, 1),
                     "timed_out": rc is None, "wrote": json_path.exists()})
        if rc != 0:
            print(f"bench.py: {b.key} {'timed out after' if rc is None else f'exited {rc} after'}"
                  f" {wall:.0f} s", file=sys.stderr)
    from benchlib import machine

    return {"harness": "benchmarks/bench.py", "quick": quick, "extra": extra,
            "machine": machine(), "runs": done}


def list_benches() -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=escape("benchmarks (bench.py run FAMILY[/NAME] [--quick])"))
    for col in ("family", "benchmark", "what it measures", "root", "about"):
        t.add_column(col)
    for family, about in FAMILIES.items():
        t.add_row(f"[bold]{family}[/]", "", about, "", "")
        for b in (b for b in BENCHES if b.family == family):
            t.add_row("", f"{b.name} {b.case}".strip(), b.what(), "yes" if b.root else "",
                      f"{b.minutes:g} min")
    Console().print(t)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="the families and their benchmarks")
    r = sub.add_parser("run", help="run a family, or one benchmark as family/name")
    r.add_argument("what", help=f"a family ({', '.join(FAMILIES)}) or family/name")
    r.add_argument("--quick", action="store_true", help="each benchmark's short run")
    r.add_argument("--out", type=Path, default=None,
                   help="the folder for the JSON (default: results/<family>/<date>/)")
    r.add_argument("--timeout", type=float, default=None,
                   help="seconds each benchmark may take (default: 3x its usual, >= 600)")
    r.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    a = ap.parse_args(argv)
    if a.cmd == "list":
        list_benches()
        return 0
    benches = select(a.what)
    out = a.out or RESULTS / benches[0].family / time.strftime("%Y-%m-%d")
    if not a.dry_run:
        out.mkdir(parents=True, exist_ok=True)
    res = run(benches, out, quick=a.quick, extra=extra, dry=a.dry_run, timeout=a.timeout)
    if a.dry_run:
        return 0
    (out / "harness.json").write_text(json.dumps(res, indent=1))
    print(f"bench.py: {out / 'harness.json'}", file=sys.stderr)
    return 0 if all(r.get("rc", 0) == 0 for r in res["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
