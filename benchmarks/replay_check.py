"""The replay against the real thing: the same Tuner and seed on a measured table's replay and
on the emulated cluster the table was recorded on (root only; issue 63, item 5).

The tuner benchmark's measured suite (``tuner_bench.py --suite measured``) replays tables
that ``record_tables.py`` measured on the emulated cluster (:mod:`measured`). Whether a
replay stands for the real thing is a measurement of its own: for a recorded job
(``--table servers``) and each seed,

* **the replay**: the Tuner as a session runs it (``tuner_bench``'s method ``tuner``: the
  default as the reference, the space's seeds first, the physics prior) on the table, with
  ``--budget`` iterations;
* **the real thing**: ``autotune tune`` on the emulated cluster the table was recorded on
  (its machines, servers, rate, model and emulated compute), with the same seed and budget,
  an empty store (no warm start) and no DDP reference;

and each kept configuration is judged by the table (its nearest measured row's median
throughput, as the replay judges), so one regret measures both. The replay agrees with
the real thing when the regrets are alike; each seed's pair is reported, with the kept
configurations and whether they are the same, and whether the table still describes what
the runtime runs today: the real trials' scores against the table's throughputs of the
same configurations (Spearman's rank correlation, and fastest / slowest on each side). Tables recorded under a per-flow cap are
refused (``autotune tune`` has no ``--flow-cap``).

    .venv/bin/python benchmarks/replay_check.py --table servers --seeds 3   # ~6 min
    .venv/bin/python benchmarks/replay_check.py --table small --seeds 3 --budget 60
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from benchlib import RESULTS, machine, require_emulator  # noqa: E402


def replay(name: str, seed: int, budget: int) -> dict:
    """The Tuner on the table ``measured-<name>``, as the tuner benchmark runs it."""
    import tuner_bench

    si = next(i for i, o in enumerate(tuner_bench.OBJECTIVES) if o.name == f"measured-{name}")
    _, _, optimum = tuner_bench._optimum(si)
    return tuner_bench._run(si, "tuner", seed, budget, optimum, {})


def real(job: dict, seed: int, budget: int, timeout: float) -> dict:
    """``autotune tune`` on the emulated cluster of the recorded ``job``; its JSON report."""
    compute = float(job["fwd_ms"]) + float(job["bwd_ms"])
    workers, machines = int(job["workers"]), int(job["machines"])
    with tempfile.TemporaryDirectory(prefix="replay-check-") as tmp:
        cmd = [sys.executable, "-m", "autotune.cli", "tune", "--model", job["model"],
               "--workers", str(workers), "--machines", str(machines),
               "--servers", str(job["servers"]), "--emulate", job["rate"],
               "--compute-ms", str(compute),
               "--backward-fraction", str(float(job["bwd_ms"]) / compute),
               "--seed", str(seed), "--budget", str(budget), "--db", str(Path(tmp) / "r.db"),
               "--no-compare-ddp", "--json"] + (["--allow-lossy"] if job["allow_lossy"] else [])
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              cwd=HERE.parent)
    if proc.returncode != 0:
        raise SystemExit(f"replay_check: autotune tune (seed {seed}) exited "
                         f"{proc.returncode}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> None:
    from measured import TABLES, MeasuredJob
    from scipy.stats import spearmanr

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", default="servers", help="a recorded job (benchmarks/data/tables)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--budget", type=int, default=100, help="tuning iterations, both sides")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds a real run may take")
    ap.add_argument("--json", type=Path, default=RESULTS / "replay_check.json")
    a = ap.parse_args(argv)
    path = TABLES / f"{a.table}.json"
    if not path.exists():
        ap.error(f"no table {path} (recorded: "
                 f"{', '.join(p.stem for p in sorted(TABLES.glob('*.json')))})")
    table = MeasuredJob.load(path)
    job = table.table["job"]
    if job.get("flow_cap"):
        ap.error(f"table {a.table} was recorded under a per-flow cap ({job['flow_cap']}): "
                 "autotune tune cannot emulate it")
    require_emulator("replay_check")
    started = time.time()
    _, best = table.optimum
    rows = []
    for seed in range(a.seeds):
        rep = replay(a.table, seed, a.budget)
        res = real(job, seed, a.budget, a.timeout)
        kept = table.space.validate(res["kept"])
        trials = [(table.throughput(table.space.validate(t["config"])), t["score"])
                  for t in res["history"] if t.get("score")]
        row = {"seed": seed, "replay_regret": rep["regret"],
               "real_regret": 1.0 - table.throughput(kept) / best,
               "replay_kept": rep["best"], "real_kept": kept,
               "same_kept": table.nearest(kept) == table.nearest(rep["best"]),
               "replay_trials": rep["trials"], "real_trials": res["trials"],
               # the real trials' scores against the table's throughputs of the same
               # configurations: does the table still rank what the runtime runs today?
               "table_vs_real_spearman": spearmanr(*zip(*trials)).statistic
               if len(trials) > 2 else None,
               "real_spread": max(r for _, r in trials) / min(r for _, r in trials),
               "table_spread": max(t for t, _ in trials) / min(t for t, _ in trials)}
        rows.append(row)
        print(f"seed {seed}: regret replay {row['replay_regret']:.1%}, real "
              f"{row['real_regret']:.1%}; the same kept row: {row['same_kept']}; the real "
              f"trials' scores against the table's: Spearman "
              f"{row['table_vs_real_spearman']:.2f}, fastest / slowest {row['real_spread']:.2f}"
              f" real, {row['table_spread']:.2f} in the table", flush=True)
    med = {k: statistics.median(r[k] for r in rows) for k in ("replay_regret", "real_regret")}
    print(f"{a.table}: median regret, replay {med['replay_regret']:.1%}, real "
          f"{med['real_regret']:.1%}; the same kept row in {sum(r['same_kept'] for r in rows)} "
          f"of {len(rows)} seeds")
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps({
        "benchmark": "replay_check", "table": a.table, "job": {k: v for k, v in job.items()
                                                               if k != "sizes"},
        "budget": a.budget, "seeds": a.seeds, "rows": rows, "median": med,
        "wall_s": time.time() - started, "command": "benchmarks/replay_check.py "
        + " ".join(sys.argv[1:]), "machine": machine()}, indent=1, default=str))
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
