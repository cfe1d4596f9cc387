"""Fixtures of the trainer tests: a local Ray and the tiny model (shared with the synchronizer tests' session)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.support import local_ray, tiny_model


@pytest.fixture(scope="package")
def ray_local() -> Iterator[Any]:
    """A local Ray for this package's tests, stopped after them (unless it was running already)."""
    yield from local_ray()


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")
