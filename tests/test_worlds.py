"""The shared worlds (tests/worlds.py) and the rule that keeps the suite on them.

- Cases run in one real gloo world, one after another, in the same processes: a result
  per rank, the process group and each rank's state kept between cases.
- A case that fails names its rank and the error, and the next case gets a fresh world.
- A test module that starts torch ranks of its own (``autotune launch``, ``torchrun``, the
  emulated cluster, ...) says why in a ``# own world: ...`` line, or uses the ``world``
  fixture; a new module that does neither fails here.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from worlds import WorldError

TESTS = Path(__file__).resolve().parent
STARTS_RANKS = re.compile(
    r"autotune\.launch|\"launch\"|launch_group\(|torchrun|mp\.spawn|start_processes|"
    r"from autotune\.emulate import Cluster|interrupt_jobs|--emulate")
OWN_WORLD = re.compile(r"#\s*own world:\s*\S")


# ---------------------------------------------------------------------- cases (rank side)
def sum_of_ranks(out: str, value: float) -> dict:
    import torch
    import torch.distributed as dist

    t = torch.tensor([value * (dist.get_rank() + 1)])
    dist.all_reduce(t)
    return {"rank": dist.get_rank(), "pid": os.getpid(), "sum": t.item(),
            "env": os.environ.get("WORLD_TEST_ENV"), "out": out}


def fail_on_rank_1(out: str) -> None:
    import torch.distributed as dist

    if dist.get_rank() == 1:
        raise ValueError("rank 1 was told to fail")


# ---------------------------------------------------------------------- tests
@pytest.mark.slow
def test_cases_share_one_world_and_a_failed_case_gets_a_fresh_one(tmp_path):
    from worlds import Worlds

    worlds = Worlds(tmp_path)  # a private one: this test breaks it on purpose
    try:
        w = worlds(2)
        first = w.run("test_worlds:sum_of_ranks", value=1.0, env={"WORLD_TEST_ENV": "x"})
        assert [r["rank"] for r in first] == [0, 1] and {r["sum"] for r in first} == {3.0}
        assert {r["env"] for r in first} == {"x"}
        assert first[0]["out"] == first[1]["out"]  # one folder per case, the same on every rank
        second = w.run("test_worlds:sum_of_ranks", value=2.0)
        assert {r["sum"] for r in second} == {6.0}
        assert [r["pid"] for r in second] == [r["pid"] for r in first]  # the same processes
        assert {r["env"] for r in second} == {None}  # a case's env ends with it
        assert first[0]["out"] != second[0]["out"]
        with pytest.raises(WorldError, match=r"(?s)failed on rank 1:.*rank 1 was told to fail"):
            w.run("test_worlds:fail_on_rank_1", timeout=60)
        third = w.run("test_worlds:sum_of_ranks", value=1.0)
        assert {r["sum"] for r in third} == {3.0} and w.starts == 2
        assert not {r["pid"] for r in third} & {r["pid"] for r in first}
    finally:
        worlds.close()


def test_every_module_that_starts_ranks_uses_a_shared_world_or_says_why() -> None:
    offenders = []
    for path in sorted(TESTS.rglob("test_*.py")):
        text = path.read_text()
        if path == Path(__file__) or not STARTS_RANKS.search(text):
            continue
        if "world(" not in text and not OWN_WORLD.search(text):
            offenders.append(str(path.relative_to(TESTS)))
    assert not offenders, (
        "these test modules start torch ranks of their own: run their cases in the shared "
        "world (the `world` fixture, tests/worlds.py), or say why not in a "
        f"'# own world: <reason>' line (docs/testing.md): {offenders}")
