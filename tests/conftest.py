"""Shared pytest set-up: markers that skip cleanly where a test cannot run."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def _netns_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces and tc)"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "needs iproute2 (`ip` and `tc`)"
    probe = "autotune-probe-ns"
    ok = subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode == 0
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None if ok else "network namespaces are not available here"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any("root" in item.keywords for item in items):
        return
    reason = _netns_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)
