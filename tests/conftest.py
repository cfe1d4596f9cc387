"""Shared fixtures: every test starts and ends with a fresh device selection; Ray's cluster record is checked."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ray_hygiene import pytest_collection_finish, pytest_runtest_setup, pytest_sessionfinish
from trinity import device

#: Hooks of tests.ray_hygiene: the session fails when Ray's current-cluster record is left at a test cluster.
__all__ = ["pytest_collection_finish", "pytest_runtest_setup", "pytest_sessionfinish"]


#: The slow tier (``nox -s slow``; ``.ci/run`` runs both tiers): whole runs, the fault suite, simulated clusters,
#: wheels and virtual environments, and the unit files whose tests start real runs. Chosen from CI's durations:
#: together about 46 of the suite's 49 minutes on 2 cores.
SLOW_TIER = (
    "tests/e2e/",
    "tests/faults/",
    "tests/cluster/",
    "tests/benchmarks/",
    "tests/test_vendor_example.py",
    "tests/launcher/test_both_loop.py",
    "tests/launcher/test_step_split.py",
    "tests/cli/test_plugins.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test of :data:`SLOW_TIER` ``slow`` (others may carry the mark themselves)."""
    root = config.rootpath
    for item in items:
        where = item.path.relative_to(root).as_posix() if item.path.is_relative_to(root) else ""
        if where.startswith(SLOW_TIER):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _fresh_device_selection(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("TRINITY_DEVICE", "TRINITY_DEVICE_RESOLVED", "TRINITY_PROBE_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    device.reset()
    yield
    device.reset()
