"""Shared fixtures: every test starts and ends with a fresh device selection; Ray's cluster record is checked."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ray_hygiene import pytest_collection_finish, pytest_runtest_setup, pytest_sessionfinish
from trinity import device

#: Hooks of tests.ray_hygiene: the session fails when Ray's current-cluster record is left at a test cluster.
__all__ = ["pytest_collection_finish", "pytest_runtest_setup", "pytest_sessionfinish"]


@pytest.fixture(autouse=True)
def _fresh_device_selection(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("TRINITY_DEVICE", "TRINITY_DEVICE_RESOLVED", "TRINITY_PROBE_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    device.reset()
    yield
    device.reset()
