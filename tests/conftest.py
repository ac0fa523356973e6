"""Shared pytest set-up: markers that skip cleanly where a test cannot run, and the
fixtures several test files use.

- ``@pytest.mark.root``: the test needs the emulated cluster (root, network namespaces,
  veth and tc); it is skipped with the emulator's own reason
  (:func:`autotune.emulate.unavailable_reason`) where that cannot run.
- ``store``: a results store in a fresh file, closed after the test.
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


@pytest.fixture
def store(tmp_path):
    from autotune.store import Store

    s = Store(tmp_path / "store.db")
    yield s
    s.close()
