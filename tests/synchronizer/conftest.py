"""Fixtures of the synchronizer tests: a local Ray, two engine doubles as Ray actors, the tiny model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.support import EngineDouble, local_ray, tiny_model


@pytest.fixture(scope="package")
def ray_local() -> Iterator[Any]:
    """A local Ray for this package's tests, stopped after them (unless it was running already)."""
    yield from local_ray()


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")


@pytest.fixture(scope="package")
def peers(ray_local: Any) -> Iterator[list[Any]]:
    """Two engine doubles in their own processes, holding received weights (no model): peers and engines."""
    remote = ray_local.remote(EngineDouble)
    actors = [remote.options(num_cpus=0).remote() for _ in range(2)]
    ray_local.get([a.model_version.remote() for a in actors])
    yield actors
    for actor in actors:
        ray_local.kill(actor)
