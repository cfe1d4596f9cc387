"""Tiny-model fixtures (see tests/models/tiny_fixtures.py) and a local Ray cluster per module."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.models.tiny_fixtures import shared_engine, tiny_model


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """A fresh local Ray cluster (2 CPUs, one torch thread per actor), shut down after the module."""
    import ray

    started = not ray.is_initialized()
    if started:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1"}})
    yield ray
    if started:
        ray.shutdown()


__all__ = ["ray_cluster", "shared_engine", "tiny_model"]
