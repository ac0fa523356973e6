"""Shared pytest set-up: markers that skip cleanly where a test cannot run, and the
fixtures several test files use.

- ``@pytest.mark.root``: the test needs the emulated cluster (root, network namespaces,
  veth and tc); it is skipped with the emulator's own reason
  (:func:`autotune.emulate.unavailable_reason`) where that cannot run. `make test` runs
  them one at a time (docs/testing.md); those that measure rates are ``serial`` too.
- ``postgres``: one throwaway PostgreSQL server for the whole run
  (:mod:`postgres_server`), skipped with the reason where none can run here.
- ``store_at``: where a fresh, empty results store is, once as an SQLite path and once as a
  PostgreSQL URL (a new database on ``postgres``): a test that takes it runs on both.
- ``store``: a results store at ``store_at``, closed after the test.
- ``world``: the shared gloo worlds (:mod:`worlds`), started once per test process.

A run that writes the default results store (``./autotune.db`` in the checkout: a session
left with ``db=None`` and no ``store=False``) fails, naming the file: a test's runs belong in
its own temporary store, and a user's store in the checkout must not gain test runs.
"""

from __future__ import annotations

import gc
import signal
from pathlib import Path

import pytest

DEFAULT_STORE = "autotune.db"
_BEFORE = pytest.StashKey[object]()

# pytest-xdist's workers ignore SIGINT (the controller takes Ctrl-C), and a process started
# with SIGINT ignored passes that on: every job a test starts would then ignore SIGINT in
# every rank, as autotune keeps a stop signal inherited as ignored (docs/store.md). The
# tests start their jobs as from a terminal; the ones about an inherited SIG_IGN set it in
# the child themselves.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _state(path: Path) -> object:
    """What the file is now: None where absent, else its size and change time (a write
    through SQLite's WAL changes the -wal file's, so both are read)."""
    return tuple((p.stat().st_size, p.stat().st_mtime_ns) if p.exists() else None
                 for p in (path, path.with_name(path.name + "-wal")))


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_BEFORE] = _state(session.config.rootpath / DEFAULT_STORE)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):  # pytest-xdist's controller checks once
        return
    path = session.config.rootpath / DEFAULT_STORE
    if _state(path) != session.config.stash[_BEFORE]:
        writer = session.config.get_terminal_writer()
        writer.line()
        writer.line(
            f"FAILED: a test wrote the default results store {path}: give its session a "
            f"store in a temporary folder (db=...) or store=False", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    """A test process's last garbage collection, once. After this hook pytest's
    unraisable-exception check collects five times over (``gc_collect_harder``), and in a
    test process that imported torch and the frameworks each full pass takes a second or
    more: past 5 s, pytest-xdist's transport interrupts the process (execnet's
    ``_terminate_execution``), and the ``KeyboardInterrupt`` lands in whatever runs then.
    One pass here finalises what the tests left (its unraisable exceptions are still
    reported); ``gc.freeze`` then leaves the survivors out of the five passes."""
    if hasattr(config, "workerinput"):
        gc.collect()
        gc.freeze()


def pytest_itemcollected(item: pytest.Item) -> None:
    """Where the tests of `make test`'s first part run (pytest-xdist, ``--dist loadgroup``,
    which reads the groups before any ``collection_modifyitems`` here): a file's tests in
    one test process, so that its module fixtures and shared worlds start once; the
    emulated cluster's tests one after another in one process (their namespaces and
    clean-up checks never meet), beside the rest."""
    if not any(m.name == "xdist_group" for m in item.iter_markers()):
        group = "emulated" if "root" in item.keywords else item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # files with slow tests first, so that the test processes end together rather than
    # one finishing a long file alone; the same order in every process
    slow_files = {item.path for item in items if "slow" in item.keywords}
    items.sort(key=lambda item: item.path not in slow_files)
    if not any("root" in item.keywords for item in items):
        return
    from autotune.emulate import unavailable_reason

    reason = unavailable_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def postgres():
    from postgres_server import PostgresServer

    reason = PostgresServer.unavailable()
    if reason is not None:
        pytest.skip(reason)
    with PostgresServer() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def store_at(request, tmp_path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    return request.getfixturevalue("postgres").database()


@pytest.fixture
def store(store_at):
    from autotune.store import Store

    s = Store(store_at)
    yield s
    s.close()


@pytest.fixture(scope="session")
def world(tmp_path_factory):
    """Shared gloo worlds (tests/worlds.py): ``world(2).run("module:function", **kw)`` runs
    a case on every rank of a 2-rank world started once for the test run."""
    from worlds import Worlds

    worlds = Worlds(tmp_path_factory.mktemp("worlds"))
    yield worlds
    worlds.close()
