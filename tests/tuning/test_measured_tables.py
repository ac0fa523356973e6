"""The measured tabular benchmarks (benchmarks/data/tables) and their replay
(benchmarks/measured.py): what the tuner benchmark's measured suite rests on."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from measured import TABLES, MeasuredJob, load_all  # noqa: E402

from autotune.tuning.space import MiB, SearchSpace  # noqa: E402

RECORDED = sorted(TABLES.glob("*.json"))


def _table(space: SearchSpace, rows: list[tuple[dict, list[float]]]) -> dict:
    return {"job": {"name": "t", "machines": 2, "workers_per_machine": 1, "servers": 0,
                    "workers": 2, "sizes": [4 * MiB]},
            "space": [[p.name, list(p.values)] for p in space.params],
            "space_facts": dict(space.facts),
            "warmup": {"one_stream_s": [0.1], "many_streams_s": [0.1]},
            "rows": [{"config": c, "switch_s": t[0], "times_s": t} for c, t in rows]}


def test_a_proposal_is_answered_by_the_nearest_measured_configuration():
    space = SearchSpace.build(max_streams=8)
    d = space.default()
    rows = [({**d, "streams": 1}, [0.5, 0.5]), ({**d, "streams": 8}, [0.2, 0.3, 0.25]),
            ({**d, "streams": 4, "transport": "pushpull"}, [0.4])]
    job = MeasuredJob("t", _table(space, rows))
    assert job.nearest({**d, "streams": 7}) == 1        # ordinal: 7 is next to 8
    assert job.nearest({**d, "streams": 2}) == 0
    assert job.nearest({**d, "streams": 4, "transport": "pushpull"}) == 2
    assert job.throughput({**d, "streams": 7}) == pytest.approx(1 / 0.25)
    assert job.optimum[0]["streams"] == 8
    rng = np.random.default_rng(0)
    for _ in range(20):  # a score is a mean of recorded samples, never anything else
        s = job.measure({**d, "streams": 8}, 2, rng)
        assert any(s == pytest.approx(1 / t) for t in (0.2, 0.3, 0.25))


def test_a_table_from_another_space_is_refused():
    space = SearchSpace.build(max_streams=8)
    table = _table(space, [(space.default(), [0.1])])
    table["space"][0][1] = [1, 2]
    with pytest.raises(ValueError, match="recorded space differs"):
        _ = MeasuredJob("t", table).space


@pytest.mark.skipif(not RECORDED, reason="no recorded tables (benchmarks/record_tables.py)")
def test_the_recorded_tables_are_what_the_issue_asks_for():
    jobs = load_all()
    assert len(jobs) >= 5
    for job in jobs:
        rows = job.table["rows"]
        assert len(rows) >= 300 or len(rows) == job.space.size(), job.name
        assert all(len(r["times_s"]) >= 6 for r in rows), job.name
        # distinct configurations of the job's own space (a codec that encodes no chunk
        # is the lossless configuration it runs as, issue 63)
        assert job.measured == len({job.space.key(job.space.canonical(r["config"]))
                                    for r in rows})
        for r in rows[:20]:
            assert job.space.contains(r["config"]), (job.name, r["config"])
        # the prior builds as a session would, and predicts every measured configuration
        corr = job.rank_correlation()
        assert corr["configurations"] == job.measured and -1 <= corr["kendall_tau"] <= 1


def test_a_tables_resolution_of_its_optimum_falls_with_the_noise_of_its_rows():
    space = SearchSpace.build(max_streams=8)
    d = space.default()

    def job(spread: float) -> MeasuredJob:  # two rows 0.5 % apart, each sample +-spread
        noise = np.linspace(-spread, spread, 6)
        rows = [({**d, "streams": 1}, list(0.100 * (1 + noise))),
                ({**d, "streams": 8}, list(0.1005 * (1 + noise)))]
        return MeasuredJob("t", _table(space, rows))

    exact, noisy = job(0.0).resolution(), job(0.2).resolution()
    assert exact["within"] == 1.0 and exact["p90_regret"] == 0.0
    assert exact["rows"] == 2  # both within 1 % as recorded
    assert noisy["within"] < 0.9 and noisy["p90_regret"] > 0.01
    assert noisy == job(0.2).resolution()  # deterministic for its seed
    # a row 20 % behind never takes the optimum's place, however the samples are drawn
    far = MeasuredJob("t", _table(space, [({**d, "streams": 1}, [0.10, 0.101, 0.099] * 2),
                                          ({**d, "streams": 8}, [0.12, 0.121, 0.119] * 2)]))
    assert far.resolution()["within"] == 1.0 and far.resolution()["rows"] == 1
