"""Shared pytest set-up: markers that skip cleanly where a test cannot run, and the
fixtures several test files use.

- ``@pytest.mark.root``: the test needs the emulated cluster (root, network namespaces,
  veth and tc); it is skipped with the emulator's own reason
  (:func:`autotune.emulate.unavailable_reason`) where that cannot run.
- ``postgres``: one throwaway PostgreSQL server for the whole run
  (:mod:`postgres_server`), skipped with the reason where none can run here.
- ``store_at``: where a fresh, empty results store is, once as an SQLite path and once as a
  PostgreSQL URL (a new database on ``postgres``): a test that takes it runs on both.
- ``store``: a results store at ``store_at``, closed after the test.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
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
