"""Simulated multi-node Ray clusters: several raylets on this machine advertising accelerator resources."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest
import ray
from ray.cluster_utils import Cluster

from tests.ray_hygiene import private_ray_record
from trinity import device


@contextmanager
def simulated_cluster(head_cpus: float, nodes: list[Mapping[str, Any]]) -> Iterator[Cluster]:
    """Start a CPU-only head plus one raylet per entry of ``nodes`` (``Cluster.add_node`` keywords), connect to it.

    On exit Ray is shut down, the cluster stopped and the device selection forgotten. Ray's
    current-cluster record stays in a private temp dir (:func:`tests.ray_hygiene.private_ray_record`).
    """
    with pytest.MonkeyPatch.context() as patch, private_ray_record():
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
