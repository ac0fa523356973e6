"""Rank 0's tuning progress reaches the person as it happens (autotune.progress).

* Under ``autotune launch`` with its output to a pipe: a plain line per finished trial
  (number, technique, configuration, score, best trial so far), each passed on while training
  goes on, not at the end: checked against the ``step`` lines the script prints, in
  order and in arrival time, with real processes.
* Under ``autotune launch`` in a terminal (a pty): rank 0 sends events and the launcher
  draws the bar while the job runs.
* The pieces: event lines, the launcher's renderer, the plain lines, and the viewer that
  shows another process's events as this process's own bar or lines (what ``autotune
  tune`` does with its rank 0's; its end-to-end test is in tests/offline/test_tune.py).
"""

from __future__ import annotations

# own world: the launcher's own output in a terminal and a pipe

import io
import os
import pty
import re
import select
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autotune import progress
import zygote

BUDGET, STEPS = 12, 30

SCRIPT = textwrap.dedent(f"""
    import os, sys, time
    import torch
    import autotune
    import sklearn.gaussian_process, skopt.learning  # as tests/tuner_libs.py: no import wait

    rank = int(os.environ["RANK"])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    with autotune.session(model, budget={BUDGET}, store=False, warmup=1,
                          trial_iterations=2, seed=1, spend=None) as session:
        for step in range({STEPS}):
            model(torch.randn(4, 8)).sum().backward()
            session.step()
            model.zero_grad()
            time.sleep(0.1)
            if rank == 0:
                print(f"step {{step}} tuning={{session.tuning}}", flush=True)
""")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != progress.ENV}
    env.update(OMP_NUM_THREADS="1", COLUMNS="120")
    return env


def _cmd(script: Path) -> list[str]:
    return [sys.executable, "-m", "autotune.cli", "launch", "--workers", "2", str(script)]


@pytest.mark.slow
def test_plain_trial_lines_come_while_training_goes_on_through_a_pipe(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    proc = zygote.Popen(_cmd(script), env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1)
    seen: list[tuple[float, str]] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append((time.monotonic(), line.rstrip("\n")))
        assert proc.wait(timeout=120) == 0, "\n".join(t for _, t in seen)[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = [t for _, t in seen]
    log = "\n".join(text)
    trials = [i for i, t in enumerate(text) if re.match(r"\[w0\] tuning: trial \d+ ", t)]
    steps = {int(m.group(1)): i for i, t in enumerate(text)
             if (m := re.match(r"\[w0\] step (\d+) ", t))}
    assert len(trials) >= 3, log
    # each line: number, technique, configuration, score with its unit, best trial so far
    first = text[trials[0]]
    assert re.search(r"trial 0 \w+: streams=\d+ chunk_bytes=\d+[KM]iB transport=\w+.*: "
                     r"[\d.,]+ it/s; best trial [\d.,]+ it/s \[\d+/12 iterations, ", first), first
    assert "@autotune-progress" not in log  # no events where no launcher draws them
    assert any("[w0] tuning: done, 12/12 iterations" in t for t in text), log
    # one kept figure: the done line's is the table's (mean ± spread, iterations)
    done = next(t for t in text if "[w0] tuning: done, " in t)
    # ... and what tuning cost the job (docs/tuner.md, "What tuning may cost")
    figure = re.search(r"; kept .* at ([\d.,]+ ± [\d.,]+ it/s \(\d+ iterations\)); "
                       r"tuning (lost|gained) [\d.]+ s against the default \(\d+ trial iterations [+-]", done)
    row = next((t for t in text if re.match(r"\[w0\] .*throughput\s", t)), "")
    assert figure and figure.group(1) in row, (done, row)
    assert not any("[w1] tuning:" in t for t in text), "only rank 0 shows progress"
    # passed on as it happens: the first trials come before training has gone far, in
    # order and in time (the script sleeps 0.1 s per step)
    assert trials[0] < steps[6] and trials[2] < steps[12], log
    t_first, t_last_step = seen[trials[0]][0], seen[steps[STEPS - 1]][0]
    assert t_last_step - t_first > 1.0, (t_first, t_last_step)


@pytest.mark.slow
def test_launch_in_a_terminal_draws_the_bar_while_the_job_runs(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    master, slave = pty.openpty()
    # wide enough for the closing description ("kept ...: measuring it over its first 20
    # training iterations") beside the count: at 120 columns rich cuts the count off the
    # frames drawn after the lock, and whether a "12/12" frame came before them was a race
    env = {**_env(), "COLUMNS": "250"}
    proc = zygote.Popen(_cmd(script), env=env, stdout=slave, stderr=slave,
                            stdin=subprocess.DEVNULL, close_fds=True)
    os.close(slave)
    chunks: list[tuple[float, bytes]] = []
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the pty closed: every writer is gone
                    break
                if not data:
                    break
                chunks.append((time.monotonic(), data))
            elif proc.poll() is not None:
                break
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    raw = b"".join(d for _, d in chunks).decode(errors="replace")
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw)
    assert "@autotune-progress" not in plain  # the events were drawn, not printed
    assert "tuning: trial" not in plain  # no plain lines in a terminal
    counts = [int(m.group(1)) for m in re.finditer(r"tuning\s.*?(\d+)/12", plain)]
    assert counts and counts[-1] == 12, plain[-2000:]
    # drawn while the job ran: a partial bar arrived before the script's last step
    t_bar = next(t for t, d in chunks if re.search(rb"tuning.*?\b([1-9]|1[01])/12", d))
    t_end = next(t for t, d in chunks if f"step {STEPS - 1} ".encode() in d)
    assert t_end - t_bar > 1.0, (t_bar, t_end)
    assert "[w0] step 0 tuning=True" in plain
    # the bar's best trial score has its unit (issue 28)
    assert re.search(r"best trial [\d.,]+ it/s", plain), plain[-2000:]


def test_event_lines_round_trip():
    buf = io.StringIO()
    ev = progress.Events(10, out=buf)
    ev.describe("trial 0 grid")
    ev.advance(3)
    ev.stop("kept x")
    lines = buf.getvalue().splitlines()
    assert all(progress.is_event(ln) for ln in lines)
    tag, last = progress.parse("[w0] " + lines[-1])
    assert tag == "w0" and last == {"label": "tuning", "about": "of trials", "total": 10,
                                    "completed": 3, "description": "trial 0 grid",
                                    "done": True, "summary": "kept x"}
    assert progress.parse("[w0@h1] " + lines[0])[0] == "w0@h1"  # the emulated cluster's tags
    assert progress.parse("[w0] step 3") is None and progress.parse(progress.MARK + "{x") is None


def _drive(display: progress.TuningDisplay) -> None:
    """What a tuner does to its display: two trials (one failed), a message, the end."""
    display.describe("trial 0 grid")
    display.advance(2)
    display.trial(0, "grid", {"streams": 2, "chunk_bytes": 1 << 20, "transport": "allreduce"},
                  12.5, 12.5, "it/s")
    display.describe("trial 1 bayes")
    display.advance(2)
    display.trial(1, "bayes", {"streams": 1, "chunk_bytes": 65536, "transport": "pushpull",
                               "servers": 2}, None, 12.5, "it/s", error="boom")
    display.say("[yellow]trial 1 failed[/]: boom")
    display.stop("kept streams=2")


def _without_times(text: str) -> str:
    return re.sub(r"(, | in )[\d.]+ (ms|s)\b", r"\1T", text)


def test_a_viewer_shows_events_as_the_same_lines_a_display_prints():
    # what a tuner's own Lines print ...
    direct = io.StringIO()
    _drive(progress.Lines(6, out=direct))
    # ... and what another process shows from its events: the same lines
    events = io.StringIO()
    _drive(progress.Events(6, out=events))
    shown = io.StringIO()
    viewer = progress.Viewer("lines", out=shown)
    for line in events.getvalue().splitlines():
        viewer.event(progress.parse("[w0] " + line)[1])
    assert viewer.display is None  # stopped at the end
    assert _without_times(shown.getvalue()) == _without_times(direct.getvalue())
    out = shown.getvalue().splitlines()
    assert out[1].startswith("tuning: trial 0 grid: streams=2 chunk_bytes=1MiB")
    assert ": failed; best trial 12.5 it/s [4/6 iterations" in out[2]
    assert out[3] == "trial 1 failed: boom"  # the message, markup rendered


def test_a_viewer_starts_a_display_per_phase():
    events = io.StringIO()
    ddp = progress.Events(3, label="ddp", about="under DDP", out=events)
    ddp.advance(3)
    ddp.stop("147 it/s")
    tuning = progress.Events(4, out=events)
    tuning.advance(1)
    verify = progress.Events(2, label="verify", about="under the kept one", out=events)
    verify.advance(2)  # while the tuning display is still open (or its done was lost)
    verify.stop()
    shown = io.StringIO()
    viewer = progress.Viewer("lines", out=shown)
    for line in events.getvalue().splitlines():
        viewer.event(progress.parse(line)[1])
    assert viewer.display is tuning_shown(viewer)  # still open: stopped by close()
    viewer.close()
    out = _without_times(shown.getvalue()).splitlines()
    assert out == ["ddp: 3 iterations under DDP", "ddp: done, 3/3 iterations in T; 147 it/s",
                   "tuning: 4 iterations of trials",
                   "verify: 2 iterations under the kept one",
                   "verify: done, 2/2 iterations in T", "tuning: done, 1/4 iterations in T"]


def tuning_shown(viewer: progress.Viewer) -> progress.TuningDisplay | None:
    """The viewer's open tuning display, if any."""
    return viewer.displays.get(progress.TUNING)


def test_a_phase_shown_while_the_tuning_display_waits_for_the_kept_figure():
    """A session keeps its tuning display open until the kept configuration's figure is
    final; ``autotune tune`` times its verify iterations meanwhile. Plain lines show
    both and the tuning display ends with its figure; a bar (one at a time) stops for
    the verify bar and its closing words come as a line."""
    events = io.StringIO()
    tuning = progress.Events(4, out=events)
    tuning.advance(4)
    tuning.describe("kept streams=2: measuring it over its first 20 training iterations")
    verify = progress.Events(2, label="verify", about="under the kept one", out=events)
    verify.advance(2)
    verify.stop("61.9 it/s")
    tuning.stop("kept streams=2 at 62.5 ± 1.2 it/s (6 iterations)")
    lines = io.StringIO()
    viewer = progress.Viewer("lines", out=lines)
    for line in events.getvalue().splitlines():
        viewer.event(progress.parse(line)[1])
    assert viewer.displays == {}
    out = _without_times(lines.getvalue()).splitlines()
    assert out == ["tuning: 4 iterations of trials", "verify: 2 iterations under the kept one",
                   "verify: done, 2/2 iterations in T; 61.9 it/s",
                   "tuning: done, 4/4 iterations in T; kept streams=2 at 62.5 ± 1.2 it/s "
                   "(6 iterations)"]

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    bars = Tty()
    viewer = progress.Viewer("bar", out=bars)
    for line in events.getvalue().splitlines():
        viewer.event(progress.parse(line)[1])
    assert viewer.displays == {}
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", bars.getvalue())
    assert "tuning: kept streams=2 at 62.5 ± 1.2 it/s (6 iterations)" in text, text


def test_a_tuning_that_failed_never_says_done():
    """Issue 28: a session that failed ends its display with ``failed``, on its own
    lines and through events shown by another process, and says nothing was kept."""
    from autotune.leader.display import SessionDisplay

    events, shown = io.StringIO(), io.StringIO()
    display = SessionDisplay(True, "it/s", lambda: 812.0)
    display._progress = progress.Events(10, out=events)
    display.advanced(3)
    display.ended({"streams": 2}, "failed")
    viewer = progress.Viewer("lines", out=shown)
    for line in events.getvalue().splitlines():
        viewer.event(progress.parse(line)[1])
    out = _without_times(shown.getvalue()).splitlines()
    assert out == ["tuning: 10 iterations of trials", "tuning: failed, 3/10 iterations in T"]


def test_each_message_is_said_once_a_session(capsys):
    """Issue 64 item 4: a message that a state was reached is one line a session, however
    often the state is reached again (the prior's weight once printed 6 times a run):
    on the progress display's lines and, without one, on stderr."""
    from autotune.leader.display import SessionDisplay

    shown = io.StringIO()
    display = SessionDisplay(True, "it/s", lambda: None)
    display._progress = progress.Lines(8, out=shown)
    prior = "the physics prior ranks the trials wrongly (...): it proposes nothing more"
    for _ in range(6):
        display.say(prior)
    display.say("tuning paused: 0.50 s lost")
    lines = shown.getvalue().splitlines()
    assert sum(prior in line for line in lines) == 1, lines
    assert sum("tuning paused" in line for line in lines) == 1, lines
    display._progress = None
    display.say(prior)
    display.say("tuning waits for iteration 16")
    display.say("tuning waits for iteration 16")
    err = capsys.readouterr().err
    assert prior not in err and err.count("tuning waits for iteration 16") == 1, err


def test_overtime_says_so_once_and_the_done_line_counts_every_iteration():
    """Issues 63/64: a race past the budget (overtime) is one line, and the display's total
    grows by what it may take, so the done line says how many iterations the trials took
    in all."""
    from autotune.leader.display import SessionDisplay

    shown = io.StringIO()
    display = SessionDisplay(True, "it/s", lambda: None)
    display._progress = progress.Lines(8, out=shown)
    display.advanced(8)
    display.overtime(3, 8)
    display.advanced(6)  # the race told them apart before its 8
    display.ended({"streams": 2})
    out = _without_times(shown.getvalue()).splitlines()
    said = [line for line in out if "racing them" in line]
    assert len(said) == 1 and "3 candidates" in said[0] and "at most 8 more" in said[0], out
    assert any("14/16 iterations" in line for line in out), out
    # one candidate proven faster, measured too few times to be kept: confirmed, not raced
    shown = io.StringIO()
    display = SessionDisplay(True, "it/s", lambda: None)
    display._progress = progress.Lines(8, out=shown)
    display.overtime(1, 4)
    out = _without_times(shown.getvalue()).splitlines()
    said = [line for line in out if "measuring it for at most 4 more" in line]
    assert len(said) == 1 and "the one candidate" in said[0], out


def test_the_best_trial_never_goes_down_and_the_done_line_is_the_kept_figure():
    """Issue 38: while trials run a session's display shows the best trial so far; the
    kept configuration's mean (the schedule's "best") falls as confirm trials measure it
    again (the first, picked for being high, was lucky), so it is not what a progress
    line shows. The display closes, once the kept figure is final, with that figure as
    the table shows it: mean ± spread (iterations)."""
    from autotune.leader.display import SessionDisplay
    from autotune.tuning.trial import Trial
    from autotune.units import fmt_score

    kept = {"streams": 2}
    trials = [(100.0, 100.0), (120.0, 120.0), (104.0, 112.0), (96.0, 108.0)]  # score, mean
    mean = [None]
    shown = io.StringIO()
    display = SessionDisplay(True, "it/s", lambda: mean[0])
    display._progress = progress.Lines(8, out=shown)
    display.measured_by(lambda c: (mean[0], 6.5, 25) if c == kept else None)
    for i, (score, kept_mean) in enumerate(trials):
        mean[0] = kept_mean
        display.advanced(2)
        display.trial_finished(Trial(i, kept, 2, "confirm" if i > 1 else "grid", score=score))
    display.locked(kept)
    assert len(shown.getvalue().splitlines()) == 1 + len(trials)  # no done line yet
    took = display._progress.elapsed_s()
    time.sleep(0.02)  # the wait for the kept figure is not time spent tuning
    assert display._progress.elapsed_s() == took
    mean[0] = 101.5  # its first training iterations count too
    display.kept_measured(kept)
    out = shown.getvalue().splitlines()
    best = [float(re.search(r"best trial ([\d.,]+) it/s", line).group(1)) for line in out[1:5]]
    assert best == [max(score for score, _ in trials[:i + 1]) for i in range(len(trials))]
    assert out[5].startswith("tuning: done, 8/8 iterations in ")
    assert out[5].endswith(f"; kept streams=2 at {fmt_score(101.5, 'it/s', 6.5)} (25 iterations)")
    display.ended(kept)  # the session ends: already closed, nothing more
    assert len(shown.getvalue().splitlines()) == 6


def test_the_done_line_says_why_the_fastest_trial_was_not_kept():
    """Issue 65 item 5: why a faster-looking trial was not kept is in the done line (the
    clause the schedule hands the display at the lock, tests/schedule/test_stakes.py)."""
    from autotune.leader.display import SessionDisplay
    from autotune.tuning.trial import Trial

    kept = {"streams": 2}
    why = ("not the fastest trial's streams=4 (130 it/s once, 98 it/s on average over 5 "
           "measurements): its mean's lower bound, 90 it/s, is under the kept one's")
    shown = io.StringIO()
    display = SessionDisplay(True, "it/s", lambda: 101.5)
    display._progress = progress.Lines(4, out=shown)
    display.measured_by(lambda c: (101.5, 6.5, 25) if c == kept else None)
    display.advanced(4)
    display.trial_finished(Trial(0, {"streams": 4}, 4, "grid", score=130.0))
    display.locked(kept, why)
    display.kept_measured(kept)
    done = shown.getvalue().splitlines()[-1]
    assert done.startswith("tuning: done") and done.endswith(f"(25 iterations); {why}"), done
    display.tuning(4)  # a re-tune's done line says it only if its own lock does
    display._progress = progress.Lines(4, out=shown)
    display.locked(kept)
    display.kept_measured(kept)
    assert not shown.getvalue().splitlines()[-1].endswith(why)


def test_a_viewer_never_raises_on_a_malformed_event():
    shown = io.StringIO()
    viewer = progress.Viewer("lines", out=shown)
    viewer.event({"total": "many", "completed": None, "description": 3,
                  "trial": {"index": "x", "config": [1, 2], "score": "fast", "best": {}}})
    viewer.event({"label": "tuning", "done": True, "summary": None})
    out = shown.getvalue().splitlines()
    assert out[0] == "tuning: 0 iterations of trials"
    assert out[1].startswith("tuning: trial -1 ?: : ; best trial - [0/0 iterations, ")
    assert out[2].startswith("tuning: done, 0/0 iterations in ") and "None" not in out[2]


def test_terminal_prints_lines_and_draws_events():
    buf = io.StringIO()
    got = []
    term = progress.Terminal(buf, on_event=lambda tag, ev: got.append((tag, ev)))
    term.feed("[w0] hello\n")
    term.feed(f"[w0] {progress.MARK}" + '{"total": 4, "completed": 1, "description": "t0"}\n')
    term.feed("[w1] world\n")
    term.feed(f"[w0] {progress.MARK}" + '{"total": 4, "completed": 2, "say": "[bold]note[/] [x"}\n')
    term.feed(f"[w0] {progress.MARK}" + '{"total": 4, "completed": 4, "done": true}\n')
    term.close()
    out = buf.getvalue()
    assert "[w0] hello" in out and "[w1] world" in out and progress.MARK not in out
    assert "[w0] note [x" in out  # a rank's message, printed as its line
    assert [t for t, _ in got] == ["w0", "w0", "w0"] and got[-1][1]["done"]


def test_plain_lines_per_trial(monkeypatch):
    buf = io.StringIO()
    lines = progress.Lines(6, out=buf)
    lines.advance(2)
    lines.trial(0, "grid", {"streams": 2, "chunk_bytes": 1 << 20, "transport": "allreduce"},
                12.5, 12.5, "it/s")
    lines.advance(2)
    lines.trial(1, "bayes", {"streams": 1, "chunk_bytes": 65536, "transport": "pushpull",
                             "servers": 2}, None, 12.5, "it/s", error="boom")
    lines.stop("kept streams=2")
    out = buf.getvalue().splitlines()
    assert out[0] == "tuning: 6 iterations of trials"
    assert out[1].startswith("tuning: trial 0 grid: streams=2 chunk_bytes=1MiB "
                             "transport=allreduce") and ": 12.5 it/s; best trial 12.5 it/s [2/6" in out[1]
    assert "servers=2" in out[2] and ": failed; best trial 12.5 it/s [4/6" in out[2]
    assert out[3].startswith("tuning: done, 4/6 iterations in ") and out[3].endswith("kept streams=2")


def test_mode_follows_the_environment_then_the_terminal(monkeypatch):
    monkeypatch.setenv(progress.ENV, "events")
    assert progress.mode(io.StringIO()) == "events"
    monkeypatch.delenv(progress.ENV)
    assert progress.mode(io.StringIO()) == "lines"

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert progress.mode(Tty()) == "bar"


def test_scores_on_a_bar_always_have_a_unit():
    """Issue 28: a score is never a bare number (nor ``2.27e+04``): with the run's unit,
    or ``?`` where the unit is missing."""
    assert progress.describe_trial(3, "bayes", 22700.4, "samples/s") == \
        "trial 3 bayes     best trial 22,700 samples/s"
    assert progress.describe_trial(3, "bayes", 22700.4, "").endswith("best trial 22,700 ?")
    assert progress.describe_trial(0, "warm", None, "it/s").endswith("best trial -")
    assert progress.kept_summary({"streams": 2}, 812.0, "").endswith("at 812 ?")
    out = io.StringIO()
    lines = progress.Lines(4, out=out)
    lines.trial(1, "bayes", {"streams": 2}, 22700.0, 22700.0, "")
    assert ": 22,700 ?; best trial 22,700 ? [" in out.getvalue()


def test_lines_beside_a_host_tqdm_bar_take_a_line_of_their_own():
    """The HF Trainer's and Lightning's progress bars are tqdm's. Beside an open one, the
    display is plain lines (no second bar), and a line is never glued onto the bar: in a
    pipe it starts after a line end, in a terminal (a real pty) tqdm clears the bar,
    prints the line and draws the bar again below it."""
    from tqdm import tqdm

    from autotune.progress import host_bars, mode, write_line

    class FrameworkBar(tqdm):  # as Lightning subclasses it
        pass

    pipe = io.StringIO()
    bar = FrameworkBar(total=10, file=pipe, mininterval=0)
    try:
        bar.update(3)
        assert bar in host_bars()
        master, slave = pty.openpty()
        with os.fdopen(slave, "w") as tty:
            assert mode(tty) == "lines"  # a terminal, but the host's bar is there
            write_line("tuning: trial 1", pipe)
            assert "\ntuning: trial 1\n" in pipe.getvalue()
            assert pipe.getvalue().index("3/10") < pipe.getvalue().index("tuning: trial 1")
            shown = FrameworkBar(total=10, file=tty, mininterval=0)
            shown.update(3)
            write_line("tuning: trial 2", tty)
            tty.flush()
            time.sleep(0.2)
            seen = b""
            while select.select([master], [], [], 0.5)[0]:
                seen += os.read(master, 65536)
            shown.close()
        os.close(master)
        text = seen.decode(errors="replace")
        cleared = text.index("tuning: trial 2")
        assert "\r" in text[:cleared] and "3/10" in text[:cleared], text
        assert "3/10" in text[cleared:], text  # the bar again, below the line
    finally:
        bar.close()
    assert bar not in host_bars()
