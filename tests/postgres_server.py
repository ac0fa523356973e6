"""A throwaway PostgreSQL server for the tests: Debian's ``postgresql`` package, ``initdb``
in a temporary directory, listening on loopback only (or on one address given, e.g. an
emulated host's, with ``wrap`` running the server inside that host's network namespace),
with password authentication; stopped and removed at the end. The tests make their
databases through its Unix socket, which every namespace reaches.

``PostgresServer.unavailable()`` says why one cannot run here (no ``initdb`` found, or
root without the ``postgres`` user to run it as), None when it can. ``make test`` installs
the package on a fresh Debian machine (Makefile's ``postgres`` target).
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

USER = "autotune_test"
PASSWORD = "s3cret-pw-never-shown"


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class PostgresServer:
    """One server (see the module docstring); :meth:`database` makes a fresh database and
    returns its ``postgresql://`` URL."""

    def __init__(self, host: str = "127.0.0.1",
                 wrap: Callable[[list[str]], list[str]] | None = None) -> None:
        self.host = host
        self.wrap = wrap or (lambda argv: argv)
        self.bindir = _bindir()
        self.port = 0
        self.dir: Path | None = None
        self._names = itertools.count()

    @staticmethod
    def unavailable() -> str | None:
        if _bindir() is None:
            return ("no PostgreSQL server here (Debian: apt-get install postgresql; "
                    "`make test` does it as root)")
        if os.geteuid() == 0:
            try:
                import pwd

                pwd.getpwnam("postgres")
            except KeyError:
                return "running as root without a 'postgres' user to run initdb as"
        return None

    def _as_owner(self, argv: list[str]) -> list[str]:
        if os.geteuid() != 0:
            return self.wrap(argv)
        return self.wrap(["runuser", "-u", "postgres", "--", *argv])

    def _run(self, argv: list[str], timeout: float = 60.0) -> str:
        out = subprocess.run(self._as_owner(argv), capture_output=True, text=True,
                             timeout=timeout, cwd="/")
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:2])} failed ({out.returncode}): "
                               f"{(out.stderr or out.stdout)[-2000:]}")
        return out.stdout

    def start(self) -> "PostgresServer":
        reason = self.unavailable()
        if reason:
            raise RuntimeError(reason)
        assert self.bindir is not None
        self.dir = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
        os.chmod(self.dir, 0o755)
        data, pwfile = self.dir / "data", self.dir / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
            shutil.chown(pwfile, "postgres", "postgres")
        self._run([str(self.bindir / "initdb"), "-D", str(data), "-U", USER, "-A",
                   "scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8", "--no-sync"])
        pwfile.unlink()
        with open(data / "pg_hba.conf", "a") as f:  # password logins from the host's subnet
            f.write("host all all samenet scram-sha-256\n")
        self.port = _free_port("127.0.0.1")
        opts = (f"-c listen_addresses={self.host} -p {self.port} -k {self.dir} "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                "-c max_connections=200")
        self._opts = opts
        self.resume()
        return self

    def resume(self) -> None:
        """Start the server (again, after :meth:`halt`), on the same port and data."""
        assert self.dir is not None and self.bindir is not None
        self._run([str(self.bindir / "pg_ctl"), "-D", str(self.dir / "data"), "-l",
                   str(self.dir / "log"), "-w", "-t", "60", "-o", self._opts, "start"],
                  timeout=90)

    def halt(self) -> None:
        """Stop the server at once, keeping its data: a database host lost mid-run."""
        assert self.dir is not None and self.bindir is not None
        self._run([str(self.bindir / "pg_ctl"), "-D", str(self.dir / "data"), "-m",
                   "immediate", "-w", "stop"], timeout=60)

    def url(self, database: str = "postgres", *, password: bool = True) -> str:
        auth = f"{USER}:{PASSWORD}" if password else USER
        return f"postgresql://{auth}@{self.host}:{self.port}/{database}"

    def database(self) -> str:
        """A new, empty database; its URL (with the password in it)."""
        import psycopg

        name = f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(host=str(self.dir), port=self.port, user=USER, password=PASSWORD,
                             dbname="postgres", autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'create database "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self.dir is None:
            return
        if self.port:
            try:
                self._run([str(self.bindir / "pg_ctl"), "-D", str(self.dir / "data"), "-m",
                           "immediate", "-w", "stop"], timeout=60)
            except (RuntimeError, subprocess.TimeoutExpired):
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None

    def __enter__(self) -> "PostgresServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":  # a server to try things on: prints its URL, Ctrl-C stops it
    with PostgresServer() as pg:
        print(pg.url(), flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
