"""Forked ranks look like fresh interpreters (autotune/forked.py): the same script under
``autotune launch --fork`` and ``--no-fork`` sees the same process, but for what a fork
cannot change (``/proc``'s view) and what must differ by rank (its random generators).
"""

# own world: the launcher's way of starting ranks is what is tested

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

FACTS = str(Path(__file__).resolve().parent / "forked_facts.py")


def _launch(tmp_path: Path, how: str, *ending: str, workers: int = 2,
            ignore_sigint: bool = False) -> tuple[int, str, list[dict]]:
    out = tmp_path / f"{how}{'-'.join(ending)}"
    proc = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "launch", "-n", str(workers), f"--{how}",
         FACTS, str(out), *ending], capture_output=True, text=True, timeout=120,
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint
        else None)
    facts = [json.loads(Path(f"{out}.{r}.json").read_text()) for r in range(workers)]
    for r in range(workers):  # the interpreter's exit waited for the thread and ran atexit
        assert Path(f"{out}.{r}.thread").read_text() == "joined", (how, r, proc.stdout)
        assert Path(f"{out}.{r}.atexit").read_text() == "ran", (how, r, proc.stdout)
    return proc.returncode, proc.stdout + proc.stderr, facts


def _same(fork: dict, fresh: dict) -> None:
    for key in ("name", "path0", "rank", "world_size", "signals", "excepthook",
                "autotune_loaded", "fds", "threads", "file"):
        assert fork[key] == fresh[key], (key, fork[key], fresh[key])
    assert fork["argv"][0] == fresh["argv"][0] == FACTS


def test_a_forked_rank_sees_what_a_fresh_one_does_and_ends_alike(tmp_path):
    for ending, code in (((), 0), (("exit", "3"), 3)):
        results = {how: _launch(tmp_path, how, *ending) for how in ("fork", "no-fork")}
        (fork_code, fork_out, fork), (fresh_code, fresh_out, fresh) = results.values()
        assert fork_code == fresh_code == code, (fork_out, fresh_out)
        for r in range(2):
            _same(fork[r], fresh[r])
            assert f"[w{r}] rank {r} wrote its facts" in fork_out, fork_out
        # each rank's generators are its own, as in fresh interpreters
        assert fork[0]["random"] != fork[1]["random"]
        assert fork[0]["numpy"] != fork[1]["numpy"]
    # nothing of the launcher's own packages is loaded in a rank before it imports them
    assert fork[0]["autotune_loaded"] == [], fork[0]["autotune_loaded"]


@pytest.mark.parametrize("ending, shown", [
    (("raise",), "ValueError: raised on purpose in forked_facts"),
    (("message",), "said on purpose in forked_facts")])
def test_a_forked_rank_that_fails_prints_and_exits_as_python_does(tmp_path, ending, shown):
    outs = {}
    for how in ("fork", "no-fork"):
        code, out, _ = _launch(tmp_path, how, *ending)
        assert code == 1, out
        assert shown in out, out
        outs[how] = [line for line in out.splitlines() if line.startswith("[w1]")]
    # the traceback starts at the script, not in the launcher's forking code
    assert outs["fork"] == outs["no-fork"], outs


def test_sigint_ignored_by_inheritance_stays_ignored_in_a_forked_rank(tmp_path):
    code, out, facts = _launch(tmp_path, "fork", ignore_sigint=True)
    assert code == 0, out
    assert all(f["signals"]["SIGINT"] == str(signal.SIG_IGN) for f in facts), facts
    code, out, facts = _launch(tmp_path, "fork")
    assert all(f["signals"]["SIGINT"] == str(signal.default_int_handler) for f in facts)


LAUNCHER_WITH_A_TEMPORARY_FOLDER = """
import sys, tempfile
from pathlib import Path
from autotune.launch import run_job
with tempfile.TemporaryDirectory() as tmp:
    code = run_job([sys.argv[1], str(Path(tmp) / "facts")], workers=2, fork=True)
    kept = sorted(p.name for p in Path(tmp).iterdir())
print(code, kept)
"""


def test_the_launchers_exit_functions_do_not_run_in_its_ranks(tmp_path):
    """A launcher's temporary folder (a ``weakref`` finalizer run at exit) outlives its
    forked ranks' exits: ``autotune tune`` and ``selftest --json`` read their result
    there after the job."""
    proc = subprocess.run([sys.executable, "-c", LAUNCHER_WITH_A_TEMPORARY_FOLDER, FACTS],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    code, kept = proc.stdout.strip().splitlines()[-1].split(" ", 1)
    assert code == "0" and "facts.0.json" in kept and "facts.1.atexit" in kept, proc.stdout


def test_a_process_that_imported_torch_first_starts_fresh_ranks():
    """Only a launcher whose import of torch is the preload's forks (what torch left to
    run at exit is known there); this test process imported torch long before."""
    import torch  # noqa: F401

    from autotune import forked

    assert forked.preload() is False
