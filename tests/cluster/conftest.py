"""Module-scoped simulated Ray clusters: several raylets on this machine advertising accelerator resources.

Simulated: the accelerators. The nodes advertise ``{"GPU": 4}`` or
``{"NPU": 8}`` but no device exists; the driver is CPU-only, so the device
backend is selected from the cluster's resources. Real: Ray's scheduling,
placement groups and the per-actor visible-devices variables Ray writes.

Each fixture shuts Ray and its cluster down and forgets the device selection
afterwards, so later tests see the CPU backend again. The cluster's
current-cluster record is written into a private Ray temp dir, so no other
``ray.init()`` on the machine joins it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ray.cluster_utils import Cluster

from tests.cluster.simulated import simulated_cluster


@pytest.fixture(scope="module")
def gpu_cluster() -> Iterator[Cluster]:
    """A CPU-only head (2 CPUs) and one node with 4 CPUs advertising 4 GPUs (``num_gpus``)."""
    with simulated_cluster(2, [{"num_cpus": 4, "num_gpus": 4}]) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def npu_cluster() -> Iterator[Cluster]:
    """A CPU-only head (1 CPU) and two nodes with 4 CPUs advertising ``{"NPU": 8}`` each."""
    with simulated_cluster(1, [{"num_cpus": 4, "resources": {"NPU": 8}}] * 2) as cluster:
        yield cluster


@pytest.fixture
def acme_dir(tmp_path: Path) -> Path:
    """A folder with two Acme device nodes (plain files: the example vendor backend only lists them)."""
    folder = tmp_path / "acme-dev"
    folder.mkdir()
    for index in range(2):
        (folder / f"acme{index}").touch()
    return folder
