"""Every trainer rank and engine worker gets its own device, on a key Ray assigns ids for or not.

Simulated: the devices. Three raylets on this machine: one advertises
``{"ACME": 2}``, one ``{"ACME": 4}`` (the example vendor backend
trinity-backend-acme: a custom Ray resource key Ray assigns no ids for; its
device nodes are empty files under ``ACME_DEVICE_DIR``, as its own tests do)
and one ``{"NPU": 2}`` (a key Ray assigns ids for). The vLLM engine is the
test double (``tests/doubles/vllm_site``). Real: Ray's scheduling, placement
groups and the masks Ray writes, the trainer's ranks with their gloo process
group and tiny model, the per-node claims (OS file locks) and the actor
processes whose death frees them.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from ray import cloudpickle
from ray.cluster_utils import Cluster
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from tests.cluster.conftest import simulated_cluster
from tests.plans import make_plan
from trinity import device
from trinity.device.selection import Selection

cloudpickle.register_pickle_by_value(sys.modules[__name__])

ACME_NODES = {"acme2": 2, "acme4": 4}


@pytest.fixture(scope="module")
def acme_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding four Acme device nodes (plain files: the backend only lists them)."""
    folder = tmp_path_factory.mktemp("acme-dev")
    for index in range(4):
        (folder / f"acme{index}").touch()
    return folder


@pytest.fixture(scope="module")
def cluster(acme_dir: Path) -> Iterator[Cluster]:
    """A CPU-only head, an Acme node with 2 devices, one with 4, and an NPU node with 2 (each node tagged by name)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ACME_DEVICE_DIR", str(acme_dir))
        nodes = [{"num_cpus": 3, "resources": {"ACME": count, name: 10}} for name, count in ACME_NODES.items()]
        nodes.append({"num_cpus": 2, "resources": {"NPU": 2, "npu2": 10}})
        with simulated_cluster(1, nodes) as started:
            claimed = [device.assignment.claims_folder(n["NodeID"], "ACME").parent for n in ray.nodes()]
            yield started
        for folder in claimed:  # the lock files of this cluster's nodes (their holders are gone)
            shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def acme(cluster: Cluster) -> Selection:
    """The Acme backend selected on the driver, as ``cluster.device: acme`` does."""
    return device.select_backend("acme", cluster_resources=ray.cluster_resources())


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model folder (built once per session)."""
    from tests.models.tiny_fixtures import tiny_path

    return tiny_path(tmp_path_factory)


def node_id(tag: str) -> str:
    """Return the Ray node id of the node advertising resource ``tag``."""
    (found,) = [n["NodeID"] for n in ray.nodes() if n["Alive"] and tag in n["Resources"]]
    return str(found)


def group_on(tag: str, bundles: int, key: str = "ACME") -> PlacementGroup:
    """Reserve ``bundles`` bundles of one ``key`` device each on the node tagged ``tag`` and wait for them."""
    group = placement_group([{key: 1, "CPU": 0.25, tag: 0.01}] * bundles, strategy="STRICT_PACK")
    ray.get(group.ready(), timeout=60)
    return group


def in_bundle(group: PlacementGroup, index: int) -> dict[str, Any]:
    """Ray options placing an actor on bundle ``index`` of ``group``."""
    return {"scheduling_strategy": PlacementGroupSchedulingStrategy(
        placement_group=group, placement_group_bundle_index=index, placement_group_capture_child_tasks=True)}


def start_ranks(group: PlacementGroup, plan: Any) -> list[Any]:
    """Start one trainer rank actor (``FSDPWorker``, constructed only) per bundle of ``group``."""
    from trinity.trainer.trainer import remote_worker_class, worker_actor_options

    count = len(group.bundle_specs)
    remote = remote_worker_class()
    return [remote.options(**worker_actor_options(0.25, group, rank)).remote(plan, rank, count) for rank in
            range(count)]


def assignment_of(worker: Any) -> dict[str, Any]:
    """Run inside an actor (``__ray_call__``): the actor's device assignment as a record."""
    return worker.devices.as_record()  # type: ignore[no-any-return]


def assignments(actors: list[Any]) -> list[dict[str, Any]]:
    """Return each actor's device assignment record."""
    return list(ray.get([a.__ray_call__.remote(assignment_of) for a in actors], timeout=120))


def test_trainer_ranks_on_the_two_device_node_get_one_device_each(acme: Selection, tiny_model: Path) -> None:
    from trinity.trainer.trainer import FSDPTrainer

    plan = make_plan({"model.model_path": str(tiny_model), "cluster.device": "acme"})
    group = group_on("acme2", 2)
    try:
        trainer = FSDPTrainer(plan, world_size=2, placement_group=group, num_cpus_per_worker=0.25)
        try:
            ranks = [info["assignment"] for info in trainer.rank_info]
        finally:
            trainer.shutdown()
    finally:
        remove_placement_group(group)
    assert sorted(r["devices"][0] for r in ranks) == [0, 1]
    for rank in ranks:
        assert rank["source"] == "claimed" and rank["resource_key"] == "ACME"
        assert rank["node_id"] == node_id("acme2")
        assert rank["visible_devices_env"] == "ACME_VISIBLE_DEVICES"
        assert rank["visible_devices"] == str(rank["devices"][0]) and rank["local_index"] == 0


def test_two_jobs_on_one_node_never_share_a_device_and_a_dead_holder_frees_its_own(acme: Selection) -> None:
    plan = make_plan({"cluster.device": "acme"})
    first, second = group_on("acme4", 2), group_on("acme4", 2)
    try:
        job_a, job_b = start_ranks(first, plan), start_ranks(second, plan)
        held = assignments(job_a) + assignments(job_b)
        assert sorted(r["devices"][0] for r in held) == [0, 1, 2, 3]
        assert {r["node_id"] for r in held} == {node_id("acme4")}

        dead = held[1]["devices"][0]
        ray.kill(job_a[1], no_restart=True)  # its bundle is free again; a new rank takes it
        from trinity.trainer.trainer import remote_worker_class, worker_actor_options

        late_rank = remote_worker_class().options(**worker_actor_options(0.25, first, 1)).remote(plan, 1, 2)
        (late,) = assignments([late_rank])
        assert late["devices"] == [dead]
        assert sorted(r["devices"][0] for r in assignments([job_a[0], *job_b])) == sorted({0, 1, 2, 3} - {dead})
    finally:
        remove_placement_group(first)
        remove_placement_group(second)


def test_a_tensor_parallel_engine_claims_one_device_per_worker(acme: Selection, tiny_model: Path) -> None:
    from tests.doubles.vllm_path import SITE
    from trinity.common.models.engines import ENGINES, create_engines, engine_actor_options, shutdown_engines

    plan = make_plan({"mode": "explore", "model.model_path": str(tiny_model), "cluster.device": "acme",
                      "cluster.cpus_per_bundle": 0.25, "explorer.rollout_model.engine_type": "vllm",
                      "explorer.rollout_model.tensor_parallel_size": 2})
    ranks_group, engine_group = group_on("acme4", 2), group_on("acme4", 2)
    engines: list[Any] = []
    try:
        ranks = start_ranks(ranks_group, plan)
        runtime_env = engine_actor_options(plan, ENGINES.get("vllm")())["runtime_env"]
        env_vars = {**runtime_env["env_vars"], "PYTHONPATH": str(SITE)}
        engines = create_engines(plan, "vllm", options_for=lambda index: in_bundle(engine_group, index),
                                 runtime_env={**runtime_env, "env_vars": env_vars})
        (engine,) = engines
        workers = ray.get(engine.device_assignments.remote(), timeout=180)
        executor = ray.get(engine.describe.remote(), timeout=60)["executor"]
        trainer_devices = [r["devices"][0] for r in assignments(ranks)]
    finally:
        shutdown_engines(engines)
        remove_placement_group(engine_group)
        remove_placement_group(ranks_group)
    assert executor == "mp"  # Ray cannot mask its own workers for a key it assigns no ids for
    assert [w["worker"] for w in workers] == [0, 1]
    engine_devices = [w["devices"][0] for w in workers]
    assert sorted(engine_devices + trainer_devices) == [0, 1, 2, 3]
    assert all(w["source"] == "claimed" and w["node_id"] == node_id("acme4") for w in workers)
    assert {w["visible_devices"] for w in workers} == {",".join(map(str, engine_devices))}
    assert [w["local_index"] for w in workers] == [0, 1]


class Holder:
    """An actor asking for its device assignment the way trainer ranks and engines do."""

    def assignment(self) -> dict[str, Any]:
        """Return this actor's assignment (its device left uninitialised) and the ids Ray gave it."""
        record = device.assign_devices(1, make_current=False).as_record()
        record["ray_ids"] = [int(i) for i in ray.get_runtime_context().get_accelerator_ids().get("NPU", [])]
        return record


def test_on_a_key_ray_assigns_ids_for_the_ray_ids_are_used(cluster: Cluster) -> None:
    env = {"TRINITY_DEVICE": "npu", "TRINITY_DEVICE_RESOLVED": "1"}
    group = group_on("npu2", 2, key="NPU")
    try:
        holders = [
            ray.remote(Holder).options(
                num_cpus=0.25, resources={"NPU": 1},
                runtime_env={"env_vars": {**env, **extra}}, **in_bundle(group, index),
            ).remote()
            for index, extra in enumerate([{}, {"RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1"}])
        ]
        records = ray.get([h.assignment.remote() for h in holders], timeout=120)
    finally:
        remove_placement_group(group)
    assert sorted(r["devices"][0] for r in records) == [0, 1]
    for record in records:
        assert record["source"] == "ray" and record["devices"] == record["ray_ids"]
        # Ray's own mask, or (self-managed worker) the one written from Ray's ids
        assert record["visible_devices"] == str(record["ray_ids"][0])
        assert record["node_id"] == node_id("npu2")
    assert not (Path(device.assignment.claims_folder(node_id("npu2"), "NPU"))).exists()


def test_no_free_device_is_one_clear_error(acme: Selection) -> None:
    plan = make_plan({"cluster.device": "acme"})
    group = group_on("acme2", 2)
    intruder = None
    try:
        ranks = start_ranks(group, plan)
        assignments(ranks)
        # an actor Ray did not give the resource to asks anyway: every device of the node is held
        intruder = ray.remote(Holder).options(num_cpus=0.1, resources={"acme2": 0.01},
                                              runtime_env={"env_vars": device.worker_env()}).remote()
        with pytest.raises(ray.exceptions.RayTaskError, match=r"no 1 free ACME device\(s\) on Ray node"):
            ray.get(intruder.assignment.remote(), timeout=60)
    finally:
        remove_placement_group(group)
        if intruder is not None:
            ray.kill(intruder)


def test_outside_a_ray_actor_nothing_is_claimed(acme: Selection, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACME_VISIBLE_DEVICES", raising=False)
    device.release_devices()
    try:
        here = device.assign_devices(1)
    finally:
        device.release_devices()
    assert here.source == "none" and here.devices == () and here.local_index == 0
    assert here.node_id is None and "ACME_VISIBLE_DEVICES" not in os.environ
