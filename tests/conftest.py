"""Shared fixtures: every test starts and ends with a fresh device selection."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from trinity import device


@pytest.fixture(autouse=True)
def _fresh_device_selection(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("TRINITY_DEVICE", "TRINITY_DEVICE_RESOLVED", "TRINITY_PROBE_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    device.reset()
    yield
    device.reset()
