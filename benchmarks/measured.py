"""Measured objectives: the tables of ``record_tables.py``, replayed for the tuner benchmark.

A :class:`MeasuredJob` has the interface of :class:`objectives.Scenario` (``name``,
``space``, ``measure``, ``throughput``, ``optimum``, ``prior``), but every score is a real
measurement from the emulated cluster:

- **The space is restricted to the measured configurations**, as tabular benchmarks
  (HPOBench's tabular suites, NAS-Bench) do, rather than a surrogate fitted to the
  measurements (YAHPO Gym's way). A proposal is answered by the measured configuration
  nearest to it (:meth:`nearest`: per parameter, the distance of value indices, scaled
  to [0, 1] for ordinal parameters and 0/1 for the others; ties to the first recorded).
  Why: a surrogate's landscape between the measured points is the surrogate's, and its
  optimum may lie where nothing was measured; here every score, and the optimum the
  regret is taken against, is a measurement. The cost: the landscape is piecewise
  constant between measured points (most of a space of a few hundred configurations is
  measured; of the lossy job's, a sample).
- **A trial's score is drawn from that configuration's measured samples**: each scored
  iteration is one of its recorded step times, drawn with replacement, and the score is
  the mean throughput (it/s) over them, as a session scores a trial.
- **The truth** a kept configuration is judged by is its median recorded throughput.
- **The prior** is built as a session builds it (:class:`autotune.leader.tuners.
  JobTuners`): the simulator on the job's gradient sizes, world and CPU device, with the
  link as recorded at the start (tables recorded after issue 40) and as the recorded
  warm-up implies it (:func:`autotune.sim.predict.warmup_link`), and this machine's
  host and codec rates; the Tuner refits it to the trials.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from autotune.tuning.space import Config, SearchSpace

TABLES = Path(__file__).resolve().parent / "data" / "tables"


@dataclass
class MeasuredJob:
    name: str
    table: dict = field(repr=False)

    @classmethod
    def load(cls, path: Path) -> "MeasuredJob":
        table = json.loads(Path(path).read_text())
        if not table.get("rows"):
            raise ValueError(f"{path}: no measured configurations")
        return cls("measured-" + table["job"]["name"], table)

    @cached_property
    def space(self) -> SearchSpace:
        """The session's space of the recorded job, rebuilt from its facts (checked
        against the recorded parameters)."""
        f = self.table["space_facts"]
        space = SearchSpace.build(k_max=f["k_max"], workers_per_machine=f["workers_per_machine"],
                                  root_candidates=f["root_candidates"],
                                  allow_lossy=f["allow_lossy"], max_streams=f["max_streams"])
        recorded = [[n, v] for n, v in self.table["space"]]
        if [[p.name, list(p.values)] for p in space.params] != recorded:
            raise ValueError(f"{self.name}: the recorded space differs from the one rebuilt "
                             "from its facts (a table from another version?)")
        return space

    @cached_property
    def _recorded(self) -> list[dict]:
        """The table's rows, one per canonical configuration (the first recorded)."""
        out, seen = [], set()
        for r in self.table["rows"]:
            k = self.space.key(self.space.canonical(r["config"]))
            if k not in seen:
                seen.add(k)
                out.append(r)
        return out

    @cached_property
    def _rows(self) -> list[tuple[Config, np.ndarray]]:
        """Measured configurations (canonical) with their scored throughputs (it/s)."""
        return [(self.space.canonical(r["config"]), 1.0 / np.asarray(r["times_s"], dtype=float))
                for r in self._recorded]

    @cached_property
    def _codes(self) -> np.ndarray:
        return np.array([self.space.encode(c) for c, _ in self._rows], dtype=float)

    @cached_property
    def _scale(self) -> np.ndarray:
        return np.array([1.0 / max(1, len(p.values) - 1) if p.ordinal else 1.0
                         for p in self.space.params])

    @cached_property
    def _ordinal(self) -> np.ndarray:
        return np.array([p.ordinal for p in self.space.params])

    def nearest(self, config: Config) -> int:
        """Index of the measured configuration nearest to ``config``."""
        code = np.array(self.space.encode(self.space.canonical(config)), dtype=float)
        diff = np.abs(self._codes - code)
        diff = np.where(self._ordinal, diff * self._scale, (diff > 0).astype(float))
        return int(np.argmin(diff.sum(axis=1)))

    def throughput(self, c: Config) -> float:
        """The truth: the median measured throughput of the configuration answering ``c``."""
        return float(np.median(self._rows[self.nearest(c)][1]))

    def measure(self, c: Config, iterations: int, rng: np.random.Generator) -> float:
        """A trial's score: mean throughput over ``iterations - 1`` recorded samples of the
        configuration answering ``c`` (drawn with replacement; the first iteration, the
        switch, is not scored)."""
        samples = self._rows[self.nearest(c)][1]
        return float(np.mean(rng.choice(samples, size=max(1, iterations - 1))))

    def switch(self, c: Config, rng: np.random.Generator) -> float:
        """The throughput of a trial's first iteration, the switch (which a session does not
        score, but ends a trial clearly slow on it): the one recorded for the configuration
        answering ``c`` (its switch's own cost included)."""
        return 1.0 / float(self._recorded[self.nearest(c)]["switch_s"])

    @cached_property
    def optimum(self) -> tuple[Config, float]:
        tps = [float(np.median(s)) for _, s in self._rows]
        i = int(np.argmax(tps))
        return self._rows[i][0], tps[i]

    def resolution(self, margin: float = 0.01, draws: int = 1000,
                   seed: int = 0) -> dict[str, float | int]:
        """How well the table resolves its own optimum at ``margin``. Every row's recorded
        samples are drawn again, as many as it has, with replacement (the bootstrap's
        stand-in for recording the table again), ``draws`` times; on each re-drawn table
        the recorded optimum is judged as a kept configuration is, against the best row.

        A tuner's "within 1 % of the optimum" here is a verdict the table itself reproduces
        only so often: ``within`` is the share of re-drawn tables on which the recorded
        optimum is within ``margin`` of the best; ``median_regret`` and ``p90_regret`` its
        regret's median and 90th percentile over them (the second, the margin the table
        resolves nine times in ten); ``rows`` how many rows are within ``margin`` of the
        optimum as recorded. Deterministic for ``seed``."""
        samples = [s for _, s in self._rows]
        recorded = np.array([np.median(s) for s in samples])
        rng = np.random.default_rng(seed)
        drawn = np.empty((draws, len(samples)))
        for i, s in enumerate(samples):
            drawn[:, i] = np.median(s[rng.integers(0, len(s), size=(draws, len(s)))], axis=1)
        regret = 1.0 - drawn[:, int(np.argmax(recorded))] / drawn.max(axis=1)
        return {"within": float(np.mean(regret <= margin)),
                "median_regret": float(np.median(regret)),
                "p90_regret": float(np.quantile(regret, 0.9)),
                "rows": int(np.sum(recorded >= (1.0 - margin) * recorded.max())),
                "draws": draws}

    @property
    def measured(self) -> int:
        return len(self._rows)

    def prior(self):
        """The physics prior a session of this job would build (module docstring): the
        link as timed at the start (where the table recorded it) and as the warm-up
        showed it, this machine's summation, copy and codec rates (timed once per
        process, as a session's leader times them), the simulator's defaults for the rest;
        refitted to the trials as the Tuner tells them."""
        from autotune.leader.calibrate import link_calibration, merged
        from autotune.sim.predict import job_prior, warmup_link

        job, warm = self.table["job"], self.table["warmup"]
        sizes = job["sizes"]
        link = (warmup_link(warm["one_stream_s"], self.probe_times(), sum(sizes), job["workers"])
                if job["machines"] > 1 else {})
        start = merged(self.host, link_calibration(warm.get("link") or {}, link))
        return job_prior(sizes, machines=job["machines"],
                         workers_per_machine=job["workers_per_machine"],
                         servers=job["servers"], device="cpu", batch_per_worker=1,
                         calibration=start)

    @cached_property
    def host(self):
        """This machine's constants, as a session's leader measures them
        (:meth:`autotune.leader.tuners.JobTuners.starting_calibration`)."""
        from autotune.leader.calibrate import host_calibration

        return host_calibration(self.space, gradient_bytes=sum(self.table["job"]["sizes"]),
                                device="cpu")

    def pin_host(self, host: Any) -> None:
        """Use the :class:`~autotune.sim.calibration.Calibration` ``host`` as this
        machine's constants (:attr:`host`) instead of timing them. Timed rates move with
        the machine's load from process to process, and the prior with them: the tuner
        benchmark builds each run's prior on a recorded calibration
        (``benchmarks/data/hosts``), so that its figures are the same in every launch."""
        self.__dict__["host"] = host

    def probe_times(self) -> list[float]:
        """The flow-cap probe's warm-up times, as the session's probe
        (:func:`autotune.schedule.schedule.flow_probe`) would measure them: recorded with
        the warm-up, or, for a table recorded before the probe chose its chunks, that
        configuration's recorded times when it was measured."""
        from autotune.schedule.schedule import flow_probe

        warm = self.table["warmup"]
        probe = flow_probe(self.space, sum(self.table["job"]["sizes"]))
        if probe is None or self.space.key(probe) == self.space.key(warm["probe"]):
            return warm["many_streams_s"]
        i = self.nearest(probe)
        if self.space.key(self._rows[i][0]) == self.space.key(probe):
            return [float(x) for x in 1.0 / self._rows[i][1]]
        return warm["many_streams_s"]

    def rank_correlation(self) -> dict[str, Any]:
        """Kendall's tau and Spearman's rho between the prior's predicted throughput and
        the measured medians, over every measured configuration."""
        from scipy.stats import kendalltau, spearmanr

        configs = [c for c, _ in self._rows]
        predicted = np.asarray(self.prior()(configs), dtype=float)
        measured = np.array([np.median(s) for _, s in self._rows])
        return {"kendall_tau": float(kendalltau(predicted, measured).statistic),
                "spearman_rho": float(spearmanr(predicted, measured).statistic),
                "configurations": len(configs)}


def load_all(directory: Path = TABLES) -> list[MeasuredJob]:
    """Every recorded table in ``directory``, by name."""
    return [MeasuredJob.load(p) for p in sorted(Path(directory).glob("*.json"))]


def describe(jobs: list[MeasuredJob]) -> str:
    """A Markdown table of the recorded tables: what each job is, how much was measured,
    the default and the best measured configuration, the noise, the drift of the default
    over the recording, and the simulator's rank correlation with the measurements."""
    lines = ["| table | job | configurations | recording | default it/s (before / after) "
             "| best it/s | best configuration | noise (median CV) | simulator's Kendall tau |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]
    for j in jobs:
        t, job = j.table, j.table["job"]
        before = 1 / np.median(t["warmup"]["one_stream_s"][1:] or t["warmup"]["one_stream_s"])
        after = 1 / np.median(t["default_after_s"]) if t.get("default_after_s") else float("nan")
        cv = np.median([np.std(r["times_s"]) / np.mean(r["times_s"]) for r in t["rows"]])
        best, tp = j.optimum
        shown = {k: v for k, v in best.items() if j.space[k].active(best) and v != j.space[k].default}
        lines.append(
            f"| {job['name']} | {job['what']}; {job['rate']}"
            + (f", per-flow cap {job['flow_cap']}" if job.get("flow_cap") else "")
            + f", {job['model']} | {j.measured} | {t['wall_s'] / 60:.0f} min | {before:.2f} / {after:.2f} "
            f"| {tp:.2f} | `{json.dumps(shown)}` | {cv:.1%} | {j.rank_correlation()['kendall_tau']:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(describe(load_all()))
