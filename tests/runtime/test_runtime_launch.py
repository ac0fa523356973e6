"""``autotune launch``: environments, prefixed output, stopping the job when a rank fails."""

from __future__ import annotations

# own world: the launcher's failure policy is under test

import io
import time

from click.testing import CliRunner

from autotune.launch import launch, plan_processes, run_job

SCRIPT = """
import os, sys, time
r = int(os.environ["RANK"])
print("hello", r, os.environ.get("AUTOTUNE_MACHINE"), os.environ["LOCAL_RANK"],
      os.environ["WORLD_SIZE"], os.environ["AUTOTUNE_ROLE"], os.environ["MASTER_PORT"])
if len(sys.argv) > 1 and r == 1:
    print("boom on rank 1", file=sys.stderr)
    sys.exit(3)
if len(sys.argv) > 1:
    time.sleep(60)
"""


def test_plan_processes_roles_machines_and_env() -> None:
    procs = plan_processes(["train.py", "--x"], workers=4, servers=2, machines=2, port=1234)
    assert [p.role for p in procs] == ["worker"] * 4 + ["server"] * 2
    assert procs[0].cmd[1:] == ["train.py", "--x"]
    assert procs[4].cmd[1:] == ["-m", "autotune.server"]
    assert [p.env["AUTOTUNE_MACHINE"] for p in procs] == ["node0", "node0", "node1", "node1",
                                                          "server0", "server1"]
    assert [p.env["LOCAL_RANK"] for p in procs[:4]] == ["0", "1", "0", "1"]
    assert all(p.env["WORLD_SIZE"] == "6" and p.env["MASTER_PORT"] == "1234" for p in procs)
    assert all(p.env["TORCHELASTIC_USE_AGENT_STORE"] == "True" for p in procs)
    assert "AUTOTUNE_MACHINE" not in plan_processes(["t.py"], 2)[0].env


def test_bad_arguments_are_clear(tmp_path) -> None:
    res = CliRunner().invoke(launch, ["-n", "3", "-m", "2", str(tmp_path / "none.py")])
    assert res.exit_code != 0 and "no such script" in res.output
    script = tmp_path / "s.py"
    script.write_text("")
    res = CliRunner().invoke(launch, ["-n", "3", "-m", "2", str(script)])
    assert res.exit_code != 0 and "must divide" in res.output


def test_output_is_prefixed_and_success_is_zero(tmp_path) -> None:
    script = tmp_path / "ok.py"
    script.write_text(SCRIPT)
    out, err = io.StringIO(), io.StringIO()
    assert run_job([str(script)], workers=2, machines=2, out=out, err=err) == 0
    lines = sorted(out.getvalue().splitlines())
    assert lines[0].startswith("[w0] hello 0 node0 0 2 worker ")
    assert lines[1].startswith("[w1] hello 1 node1 0 2 worker ")


def test_a_failing_rank_stops_the_others_and_sets_the_exit_code(tmp_path) -> None:
    script = tmp_path / "fail.py"
    script.write_text(SCRIPT)
    out, err = io.StringIO(), io.StringIO()
    t0 = time.monotonic()
    code = run_job([str(script), "fail"], workers=3, grace=1.0, out=out, err=err)
    assert code == 3
    assert time.monotonic() - t0 < 30  # rank 0 and 2 sleep 60 s: they were stopped
    report = err.getvalue()
    assert "rank 1 (worker) failed, exit code 3" in report
    assert "[w1] boom on rank 1" in report
    assert "[w1] boom on rank 1" in out.getvalue()
