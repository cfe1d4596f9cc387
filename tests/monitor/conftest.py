"""Fixtures of the monitor tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests choose the console mode themselves; CI or TERM from the outside must not decide it."""
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
