"""The tests' zygote (tests/zygote.py) starts a process as ``subprocess`` does: the same
command, run forked and fresh, gives the same exit code, output, folder, environment and
path; signals, timeouts and sessions behave alike; and a launcher forked from it forks
its own ranks."""

# own world: how the tests' processes start is what is tested

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import zygote

pytestmark = pytest.mark.slow

FACTS = """
import json, os, sys
print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "x": os.environ.get("ZYGOTE_X"),
                  "path": sys.path, "torch": "torch" in sys.modules,
                  "stdin": sys.stdin.read()}))
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


def _both(tmp_path, *args, **kwargs) -> tuple[subprocess.CompletedProcess, ...]:
    script = tmp_path / "facts.py"
    script.write_text(FACTS)
    (tmp_path / "here").mkdir(exist_ok=True)
    env = {**os.environ, "ZYGOTE_X": "x", "PYTHONPATH": str(tmp_path / "lib")}
    return tuple(run([sys.executable, str(script), *args], capture_output=True, text=True,
                     cwd=tmp_path / "here", env=env, input="fed", timeout=60, **kwargs)
                 for run in (zygote.run, subprocess.run))


def test_a_forked_process_sees_what_a_fresh_one_does(tmp_path):
    forked, fresh = _both(tmp_path, "3")
    assert forked.returncode == fresh.returncode == 3
    assert forked.stderr == fresh.stderr == "to stderr\n"
    seen, expected = json.loads(forked.stdout), json.loads(fresh.stdout)
    assert seen["torch"] and not expected["torch"]  # what the zygote saves: torch's import
    del seen["torch"], expected["torch"]
    assert seen == expected
    assert seen["path"][1] == str(tmp_path / "lib") and seen["stdin"] == "fed"


def test_signals_timeouts_and_sessions_as_subprocess(tmp_path):
    script = tmp_path / "sleep.py"
    script.write_text("import os, time\nprint(os.getpid(), os.getsid(0), flush=True)\n"
                      "time.sleep(60)\n")
    proc = zygote.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                        start_new_session=True)
    pid, sid = map(int, proc.stdout.readline().split())
    assert pid == sid == proc.pid and proc.poll() is None
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=10) == -signal.SIGTERM
    proc.stdout.close()
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.run([sys.executable, str(script)], capture_output=True, timeout=1)
    assert time.monotonic() - t0 < 10


def test_a_launcher_forked_from_it_forks_its_ranks(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text("import os, sys\nprint('torch' in sys.modules, os.getppid())\n")
    done = zygote.run([sys.executable, "-m", "autotune.cli", "launch", "--workers", "2",
                       str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [x.split("] ")[1].split() for x in done.stdout.splitlines() if x.startswith("[w")]
    # both ranks forked (torch already there) by one parent, the launcher
    assert [x[0] for x in lines] == ["True", "True"] and lines[0][1] == lines[1][1], lines


def test_what_a_fork_cannot_give_starts_fresh(tmp_path):
    done = zygote.run([sys.executable, "-c", "import sys; print('torch' in sys.modules)"],
                      capture_output=True, text=True, timeout=60)
    assert done.stdout == "False\n"
    seen = zygote.run([sys.executable, "-c", "pass"], preexec_fn=os.getpid, timeout=60)
    assert seen.returncode == 0
