"""Module-scoped simulated Ray clusters: several raylets on this machine advertising accelerator resources.

Simulated: the accelerators. The nodes advertise ``{"GPU": 4}`` or
``{"NPU": 8}`` but no device exists; the driver is CPU-only, so the device
backend is selected from the cluster's resources. Real: Ray's scheduling,
placement groups and the per-actor visible-devices variables Ray writes.

Each fixture shuts Ray and its cluster down and forgets the device selection
afterwards, so later tests see the CPU backend again.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest
import ray
from ray.cluster_utils import Cluster

from trinity import device


@contextmanager
def simulated_cluster(head_cpus: float, nodes: list[Mapping[str, Any]]) -> Iterator[Cluster]:
    """Start a CPU-only head plus one raylet per entry of ``nodes`` (``Cluster.add_node`` keywords), connect to it.

    On exit Ray is shut down, the cluster stopped and the device selection forgotten.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_AUTH_MODE", "disabled")
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": head_cpus, "include_dashboard": False})
        try:
            for node in nodes:
                cluster.add_node(**node)
            cluster.wait_for_nodes()
            ray.init(address=cluster.address)
            yield cluster
        finally:
            ray.shutdown()
            cluster.shutdown()
            device.reset()


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
