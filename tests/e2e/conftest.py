"""Fixtures of the end-to-end runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def root(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder for the module's runs, inside one local Ray cluster the module's runs join (started if none is)."""
    import ray

    from tests.trainer.support import start_ray

    started = start_ray()
    yield tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    if started:
        ray.shutdown()
