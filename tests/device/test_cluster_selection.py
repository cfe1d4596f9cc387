"""Cluster-aware selection on a real multi-node Ray cluster (several raylets on this machine).

The head node is CPU-only, like a driver on a login node; two worker nodes
advertise ``{"NPU": 8}``. Nothing here has an Ascend device: the installed
trinity-backend-npu probes unavailable locally, and the cluster decides.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import ray
from ray.cluster_utils import Cluster
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from tests.cluster.simulated import simulated_cluster
from trinity import device


@pytest.fixture(scope="module")
def npu_cluster() -> Iterator[Cluster]:
    """A CPU-only head and two nodes advertising ``{"NPU": 8}`` (the shared simulated-cluster helper)."""
    with simulated_cluster(1, [{"num_cpus": 2, "resources": {"NPU": 8}}] * 2) as cluster:
        yield cluster


@ray.remote
class Worker:
    """A Ray actor that asks the façade, as a trainer or rollout worker would."""

    def answers(self) -> dict[str, object]:
        import trinity.device as worker_device

        selection = worker_device.current_selection()
        return {
            "name": selection.name,
            "source": selection.source,
            "collective": worker_device.get_collective_backend(),
            "pg": worker_device.get_process_group_backend(),
            "visible": os.environ.get("ASCEND_RT_VISIBLE_DEVICES"),
        }


def test_cpu_driver_selects_npu_from_the_cluster(npu_cluster: Cluster) -> None:
    local = device.get_backend_record("npu")
    assert local is not None and local.backend is not None
    assert not local.backend.probe().available, "this test assumes no Ascend device on the driver"

    selection = device.select_backend(cluster_resources=ray.cluster_resources())
    assert selection.name == "npu" and selection.source == "cluster"
    assert "NPU: 16" in selection.reason
    assert device.get_ray_resource_key() == "NPU"
    assert device.get_collective_backend() == "hccl"


def test_workers_inherit_the_decision_without_probing(npu_cluster: Cluster) -> None:
    device.select_backend(cluster_resources=ray.cluster_resources())
    key = device.get_ray_resource_key()
    assert key == "NPU"
    group = placement_group([{key: 1, "CPU": 1}] * 2, strategy="STRICT_PACK")
    ray.get(group.ready(), timeout=60)
    try:
        workers = [
            Worker.options(
                num_cpus=1,
                resources={key: 1},
                runtime_env={"env_vars": device.worker_env()},
                scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i),
            ).remote()
            for i in range(2)
        ]
        answers = ray.get([w.answers.remote() for w in workers], timeout=120)
    finally:
        remove_placement_group(group)
    for answer in answers:
        assert answer["name"] == "npu" and answer["source"] == "driver"
        assert answer["collective"] == "hccl" and answer["pg"] == "cpu:gloo,npu:hccl"
    assert sorted(a["visible"] for a in answers) == ["0", "1"]
