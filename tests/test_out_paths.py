"""Issue 28: a file option whose directory does not exist is one line and exit code 2,
naming the file and the missing directory (autotune/outpath.py), never a traceback, for
every command that writes a file."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from autotune.cli import cli
import zygote

MISSING = "/nonexistent-autotune-dir/sub"

CASES = [
    (["report", "latest", "--out", f"{MISSING}/r.png"], "--out", "r.png"),
    (["report", "latest", "--out", f"{MISSING}/r.html"], "--out", "r.html"),
    (["db", "export", "latest", "--out", f"{MISSING}/e.json"], "--out", "e.json"),
    (["db", "export", "latest", "--format", "csv", "--out", f"{MISSING}/e.csv"], "--out", "e.csv"),
    (["probe", "--draw", f"{MISSING}/g.png"], "--draw", "g.png"),
    (["selftest", "--json-out", f"{MISSING}/s.json"], "--json-out", "s.json"),
    (["tune", "--model", "mlp", "--db", f"{MISSING}/t.db"], "--db", "t.db"),
]


@pytest.mark.parametrize("args,opt,name", CASES, ids=[" ".join(c[0][:2]) + " " + c[1] for c in CASES])
def test_missing_directory_is_one_line(tmp_path, args, opt, name):
    res = CliRunner().invoke(cli, args, env={"AUTOTUNE_DB": str(tmp_path / "a.db")})
    assert res.exit_code == 2, res.output
    assert not isinstance(res.exception, Exception) or isinstance(res.exception, SystemExit)
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert lines == [f"Error: {opt}: cannot write {MISSING}/{name}: "
                     f"directory {MISSING} does not exist"], res.output
    assert "Traceback" not in res.output
    assert not (tmp_path / "a.db").exists()  # checked before any work


def test_parent_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    res = CliRunner().invoke(cli, ["report", "latest", "--out", str(f / "r.png")])
    assert res.exit_code == 2
    assert res.output.strip() == f"Error: --out: cannot write {f / 'r.png'}: {f} is not a directory"


def test_real_process_no_traceback(tmp_path):
    p = zygote.run([sys.executable, "-m", "autotune.cli", "report", "latest", "--out",
                        f"{MISSING}/r.png"], capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 2
    assert p.stdout == ""
    assert p.stderr.strip().splitlines() == [
        f"Error: --out: cannot write {MISSING}/r.png: directory {MISSING} does not exist"]


@pytest.fixture
def read_only_dir(tmp_path):
    """A directory on a read-only file system (a tmpfs mounted ``ro``: root only)."""
    import os

    if os.geteuid() != 0:
        pytest.skip("mounting a read-only file system needs root")
    ro = tmp_path / "ro"
    ro.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "none", str(ro)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield ro
    subprocess.run(["umount", str(ro)], check=True)


# Issue 65: on a read-only file system each of these ended in OSError's traceback
READ_ONLY_CASES = [c for c in CASES if c[1] != "--db"]  # `tune --db` said so in one line


@pytest.mark.parametrize("args,opt,name", READ_ONLY_CASES,
                         ids=[" ".join(c[0][:2]) + " " + c[1] for c in READ_ONLY_CASES])
def test_read_only_file_system_is_one_line(tmp_path, read_only_dir, args, opt, name):
    args = [a.replace(MISSING, str(read_only_dir)) for a in args]
    res = CliRunner().invoke(cli, args, env={"AUTOTUNE_DB": str(tmp_path / "a.db")})
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert lines == [f"Error: {opt}: cannot write {read_only_dir}/{name}: "
                     f"{read_only_dir} is on a read-only file system"], res.output
    assert not (tmp_path / "a.db").exists()  # checked before any work


def test_a_store_on_a_read_only_file_system_can_still_be_read(tmp_path, read_only_dir):
    """`--db` names a store the command may only read (`db show`): no write check."""
    res = CliRunner().invoke(cli, ["db", "show", "--db", str(read_only_dir / "none.db")])
    assert "read-only file system" not in res.output, res.output
