"""Issue 28: a run's status is always true. Real processes: ``autotune launch`` (and
``autotune tune``) stopped by SIGINT or SIGTERM closes the run as ``aborted`` with a
finish time, its trials kept; a leader rank SIGKILLed leaves a run that ``db runs``
shows as ``abandoned``."""

from __future__ import annotations

# own world: signals sent to whole jobs

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zygote

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _store_runs(db: Path) -> list[dict]:
    from autotune.store import Store, StoreError

    if not db.exists():
        return []
    try:
        with Store(db, create=False) as s:
            return [{**r, "trials": len(s.trials(r["id"]))} for r in s.runs()]
    except StoreError:
        return []


def _start(args: list[str], tmp_path: Path) -> subprocess.Popen:
    return zygote.Popen([sys.executable, "-m", "autotune.cli", *args], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
                                [str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])})


def _wait_for_trials(proc: subprocess.Popen, db: Path, n: int = 2, timeout: float = 60) -> dict:
    """The job's run once it has ``n`` trials recorded."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = _store_runs(db)
        if runs and runs[0]["trials"] >= n:
            return runs[0]
        if proc.poll() is not None:
            pytest.fail(f"the job ended first: {proc.stdout.read()[-3000:]}")
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"no run with {n} trials in {db} after {timeout} s")


def _launch(tmp_path: Path, script: str = "train_mlp.py") -> tuple[subprocess.Popen, Path]:
    db = tmp_path / "x.db"
    proc = _start(["launch", "--workers", "2", str(ROOT / "examples" / script),
                   "--steps", "100000", "--budget", "100000", "--db", str(db)], tmp_path)
    return proc, db


def _ended(proc: subprocess.Popen, timeout: float = 30) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"did not end after the signal: {out[-3000:]}")
    return proc.returncode, out


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_launch_stopped_by_a_signal_closes_the_run_as_aborted(tmp_path, sig, code):
    proc, db = _launch(tmp_path)
    before = _wait_for_trials(proc, db)
    assert before["status"] == "running" and before["finished"] is None
    proc.send_signal(sig)
    rc, out = _ended(proc)
    assert rc == code, out[-3000:]
    (run,) = _store_runs(db)
    assert run["status"] == "aborted", out[-3000:]
    assert run["finished"] and run["trials"] >= before["trials"]
    # the ranks are gone
    assert not any(os.path.exists(f"/proc/{p}") and
                   "train_mlp" in open(f"/proc/{p}/cmdline").read()
                   for p in [run["owner_pid"]] if p)


def _rank_pid(launcher: int, rank: int) -> int:
    """The pid of ``rank``'s process among the launcher's children: the launcher starts
    them in rank order (a forked rank's ``/proc/<pid>/environ`` is the launcher's, so its
    ``RANK`` cannot be read there)."""
    children = Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split()
    started = sorted(children, key=lambda c: int(
        Path(f"/proc/{c}/stat").read_text().rsplit(") ", 1)[1].split()[19]))
    if rank >= len(started):
        pytest.fail(f"no rank {rank} among the children of {launcher}: {started}")
    return int(started[rank])


def test_a_group_sigint_to_a_background_launch_is_ignored_by_every_rank(tmp_path):
    """Started from a script in the background (SIGINT ignored by inheritance, as shells
    do), a SIGINT to the whole process group is ignored by the launcher and by every rank
    alike, Lightning's included (issue 65: the ranks used to take it while the launcher
    ignored it): the job trains on. A SIGTERM then stops it as any stop does: one line,
    no replayed output, exit 143, the run aborted."""
    pytest.importorskip("lightning.pytorch", reason="lightning is not installed")
    db = tmp_path / "x.db"
    proc = zygote.Popen(
        [sys.executable, "-m", "autotune.cli", "launch", "--workers", "2",
         str(ROOT / "examples" / "train_lightning.py"), "--steps", "100000", "--budget",
         "100000", "--db", str(db)], cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    before = _wait_for_trials(proc, db, timeout=120)
    os.killpg(proc.pid, signal.SIGINT)
    after = _wait_for_trials(proc, db, n=before["trials"] + 3, timeout=60)
    assert after["status"] == "running", after
    os.killpg(proc.pid, signal.SIGTERM)
    rc, out = _ended(proc, timeout=60)
    assert rc == 143, out[-3000:]
    assert "stopped by SIGTERM" in out and "SIGINT" not in out, out[-3000:]
    assert "its last output" not in out, out[-3000:]
    (run,) = _store_runs(db)
    assert run["status"] == "aborted" and run["finished"], out[-3000:]


def test_sigterm_to_one_rank_aborts_the_run_naming_it(tmp_path):
    """A pre-empted node: SIGTERM reaches rank 1 alone (a DDP model: the user's DDP, the
    session behind its comm hook). The leader closes the run ``aborted`` (not
    ``failed``), naming rank 1; the launcher says so in one line and exits 143.

    Each stop is tested through one way in: both are the one session behind DDP's comm
    hook (issue 59), so ``autotune.session(model)`` is stopped by the launcher's signal
    above and ``autotune.session(ddp_model)`` here."""
    proc, db = _launch(tmp_path, "train_ddp.py")
    _wait_for_trials(proc, db)
    os.kill(_rank_pid(proc.pid, 1), signal.SIGTERM)
    rc, out = _ended(proc, timeout=60)
    (run,) = _store_runs(db)
    assert run["status"] == "aborted" and run["finished"], out[-3000:]
    assert "rank 1 was stopped by SIGTERM" in out, out[-3000:]
    assert rc == 143 and "its last output" not in out, out[-3000:]


def test_a_leader_killed_leaves_an_abandoned_run(tmp_path):
    from click.testing import CliRunner

    from autotune.cli import cli

    proc, db = _launch(tmp_path)
    run = _wait_for_trials(proc, db)
    leader = run["owner_pid"]
    assert leader and leader != proc.pid
    os.kill(leader, signal.SIGKILL)
    rc, out = _ended(proc)
    assert rc != 0
    res = CliRunner().invoke(cli, ["db", "runs", "--db", str(db), "--json"])
    (shown,) = json.loads(res.output)
    assert shown["status"] == "abandoned" and shown["finished"] is None
    res = CliRunner().invoke(cli, ["db", "runs", "--db", str(db), "--status", "abandoned"])
    assert res.exit_code == 0 and "abandoned" in res.output
    res = CliRunner().invoke(cli, ["db", "close", "--db", str(db), "latest"])
    assert "abandoned -> aborted" in res.output
    (closed,) = _store_runs(db)
    assert closed["status"] == "aborted" and closed["finished"] and closed["trials"] >= 2


def _stop_tune(args: list[str], tmp_path: Path, sig: int, code: int, start_s: float = 60,
               end_s: float = 30) -> None:
    """``autotune tune ARGS`` (an endless budget), stopped by ``sig`` once it has trials:
    exit ``code``, the run ``aborted`` with a finish time and every trial kept."""
    db = tmp_path / "x.db"
    proc = _start(["tune", *args, "--budget", "10000000", "--db", str(db)], tmp_path)
    before = _wait_for_trials(proc, db, timeout=start_s)
    proc.send_signal(sig)
    rc, out = _ended(proc, timeout=end_s)
    # 128 + N, or killed by signal N, which a shell shows as the same $? (128 + N). Seen
    # once in a full run (-2 after the handler had printed and called sys.exit(130); not
    # reproduced in 55 tries alone): CPython re-kills itself with SIGINT at exit when a
    # KeyboardInterrupt passed through code it ran by PyRun_*, even one caught later
    assert rc in (code, -(code - 128)), out[-3000:]
    assert "the run was closed as aborted" in out, out[-3000:]
    (run,) = _store_runs(db)
    assert run["status"] == "aborted" and run["finished"] and run["trials"] >= before["trials"]


def test_tune_simulated_stopped_by_sigint_is_aborted(tmp_path):
    cluster = tmp_path / "c.json"
    cluster.write_text(json.dumps({"machines": 4, "gpus_per_machine": 2, "nic_gbps": 10}))
    _stop_tune(["--model", "resnet50", "--simulate", str(cluster)], tmp_path, signal.SIGINT, 130)


def test_tune_local_stopped_by_sigterm_is_aborted(tmp_path):
    _stop_tune(["--model", "tune_helpers:tiny", "--workers", "2"], tmp_path, signal.SIGTERM, 143)


def _namespaces() -> set[str]:
    out = zygote.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


@pytest.mark.root
@pytest.mark.timeout(240)
def test_tune_emulated_stopped_by_sigint_is_aborted_and_leaves_no_namespace(tmp_path):
    """``autotune tune --emulate``: the same on the emulated cluster, whose hosts (network
    namespaces, veths, the bridge) are taken down too."""
    before_ns = _namespaces()
    _stop_tune(["--model", "tune_helpers:tiny", "--workers", "2", "--emulate", "200mbit"],
               tmp_path, signal.SIGINT, 130, start_s=120, end_s=60)
    assert _namespaces() <= before_ns, "the emulated hosts were left behind"
