"""Fixtures of the buffer tests: one local Ray cluster shared by the buffer tests that need it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="package")
def ray_cluster() -> Iterator[None]:
    """Start a fresh local Ray instance (2 CPUs, no dashboard) unless one runs; stop it after the buffer tests."""
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    started = False
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1"}})
        started = True
    yield
    if started:
        ray.shutdown()
