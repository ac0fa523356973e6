"""autotune.signals (issue 28): SIGTERM as an exception, the status a run closes with,
the watcher that acts at once."""

from __future__ import annotations

# own world: a whole job under `autotune launch`, started with SIGINT ignored (as a shell's `&`)

import os
import signal
import threading
import time

import pytest

from autotune.signals import Terminated, TerminateAsInterrupt, exit_code, shielded, status_of
import zygote
from signal_helpers import SigintWhenFreed


def test_status_and_exit_code_of_an_exception():
    assert status_of(None) == "finished"
    assert status_of(KeyboardInterrupt()) == "aborted" == status_of(Terminated())
    assert status_of(RuntimeError("x")) == "failed"
    assert exit_code(KeyboardInterrupt()) == 130 and exit_code(Terminated()) == 143


def test_sigterm_raises_once_and_the_handler_is_restored():
    before = signal.getsignal(signal.SIGTERM)
    seen: list[int] = []
    with pytest.raises(Terminated):
        with TerminateAsInterrupt(on_signal=seen.append):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler raises here
    assert signal.getsignal(signal.SIGTERM) is before
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen == [signal.SIGTERM]


def test_off_the_main_thread_nothing_is_installed():
    before = signal.getsignal(signal.SIGTERM)
    t = threading.Thread(target=lambda: TerminateAsInterrupt().install())
    t.start()
    t.join()
    assert signal.getsignal(signal.SIGTERM) is before


def test_shielded_ignores_stop_signals_inside():
    with shielded():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# ---------------------------------------------------------------- safe points (issue 38)
def _wait_for(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_inside_a_library_section_a_signal_is_recorded_and_raised_at_its_end():
    from autotune.signals import deferred, pending, received

    reached = []
    with TerminateAsInterrupt((signal.SIGINT, signal.SIGTERM)):
        with pytest.raises(Terminated) as stop:
            with deferred():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.2)  # a Python handler would raise here; ours records
                reached.append(pending())
        assert reached == [True] and stop.value.signum == signal.SIGINT
        assert received() == signal.SIGINT and not pending()
        # anything that ends the session now closes the run as aborted
        assert status_of(None) == "aborted" == status_of(RuntimeError("peer left"))
    assert received() is None and status_of(RuntimeError("x")) == "failed"


def test_a_section_that_fails_after_a_stop_raises_the_stop_from_the_failure():
    from autotune.signals import deferred

    with TerminateAsInterrupt((signal.SIGTERM,)):
        with pytest.raises(Terminated) as stop:
            with deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)
                raise RuntimeError("a collective broke because the peer stopped")
    assert isinstance(stop.value.__cause__, RuntimeError)


def test_a_hook_section_leaves_the_stop_for_the_next_safe_point():
    from autotune.signals import check, deferred, pending

    with TerminateAsInterrupt((signal.SIGTERM,)):
        with deferred(raise_at_end=False):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)
        assert pending()  # e.g. a gradient hook inside autograd: not raised there
        with pytest.raises(Terminated):
            check()
        assert not pending()


def test_a_stop_arriving_inside_a_finaliser_is_raised_at_the_next_safe_point():
    """Python runs a signal's handler in whatever the main thread executes, a finaliser
    included, and drops an exception raised there (printed as "Exception ignored in"):
    Ctrl-C while the user's code happened to free an object with a ``__del__`` was lost,
    and a repeat is ignored, so the job could no longer be stopped by it. Inside a
    finaliser the stop is recorded, and the next safe point (a session's ``step()``)
    raises it."""
    from autotune.signals import check, pending

    with TerminateAsInterrupt((signal.SIGINT, signal.SIGTERM)):
        SigintWhenFreed()  # made and dropped: its finaliser runs at once
        assert pending()
        with pytest.raises(Terminated) as stop:
            check()
        assert stop.value.signum == signal.SIGINT and not pending()


def test_a_launchers_wait_raises_a_stop_recorded_inside_a_finaliser(tmp_path):
    """``autotune launch``'s wait for its ranks (:func:`autotune.ranks.run`) is a safe
    point: a SIGINT that lands in a finaliser the launcher runs is recorded (Python would
    drop it) and raised there, and the ranks are stopped, not waited for. Before: the
    launcher left SIGINT to Python, which dropped it, and waited for the rank to end."""
    import sys

    from autotune.ranks import Rank, run

    done = tmp_path / "done"
    rank = Rank(0, "worker", [sys.executable, "-c", "import sys, time; time.sleep(1.5); "
                              "open(sys.argv[1], 'w').close()", str(done)],
                dict(os.environ), "w0")
    with TerminateAsInterrupt((signal.SIGINT, signal.SIGTERM)):
        with pytest.raises(Terminated) as stop:
            run([rank], grace=1.0, on_started=SigintWhenFreed)
    assert stop.value.signum == signal.SIGINT
    time.sleep(2)
    assert not done.exists()  # stopped at the stop, not run to its end


def test_restore_leaves_a_handler_someone_else_set_meanwhile():
    before = signal.getsignal(signal.SIGINT)
    guard = TerminateAsInterrupt((signal.SIGINT,)).install()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as Lightning does while it tears down
    try:
        guard.restore()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_signal_ignored_when_installed_stays_ignored():
    """Issue 65: a rank that inherited SIGINT as ignored (started in the background of a
    script) took it anyway, while its launcher ignored it."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        seen: list[int] = []
        with TerminateAsInterrupt((signal.SIGINT, signal.SIGTERM), on_signal=seen.append):
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.3)  # nothing is raised
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN and seen == []
    finally:
        signal.signal(signal.SIGINT, before)


JOB = """
import sys, time, torch, autotune
torch.set_num_threads(1)
model = torch.nn.Linear(8, 1)
with autotune.session(model, budget=0, store=False, verbose=False) as session:
    open(sys.argv[1], "w").write("open")
    for _ in range(60):
        model(torch.randn(4, 8)).sum().backward()
        session.step()
        time.sleep(0.05)
print("finished", flush=True)
"""


@pytest.mark.slow
def test_sigint_inherited_as_ignored_is_ignored_by_the_launcher_and_every_rank(tmp_path):
    import subprocess
    import sys

    script, opened = tmp_path / "job.py", tmp_path / "opened"
    script.write_text(JOB)
    proc = zygote.Popen(
        [sys.executable, "-m", "autotune.cli", "launch", "--workers", "2", str(script),
         str(opened)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))  # as bash's `&`
    deadline = time.monotonic() + 120
    while not opened.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert opened.exists(), proc.communicate(timeout=60)[0]
    os.killpg(proc.pid, signal.SIGINT)  # the whole group: the launcher and both ranks
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert "finished" in out and "Traceback" not in out and "SIGINT" not in out, out
