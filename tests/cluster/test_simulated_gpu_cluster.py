"""The run's layout on a simulated GPU cluster: a CPU-only driver, one Ray node advertising 4 GPUs.

Simulated: the GPUs. The worker node is started with ``num_gpus=4`` on this
CPU-only machine, so no CUDA device exists and nothing imports CUDA; the
driver has no device and selects the real CUDA backend (trinity-backend-cuda)
from the cluster's resources; the engine is a probe actor, not vLLM.
Real: Ray's scheduling and placement groups, the ``CUDA_VISIBLE_DEVICES``
Ray writes per actor (or leaves alone under ``RAY_EXPERIMENTAL_NOSET_...``),
the environment handed to workers, the framework's option builders
(``engine_actor_options``, ``Placement.engine_options``, ``worker_actor_options``)
and the CUDA backend package's answers (collective, visible-devices variable).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
import ray
from ray import cloudpickle
from ray.cluster_utils import Cluster

from tests.cluster.probes import probe_answers as view_of_worker
from tests.cluster.probes import select_from_cluster
from tests.plans import make_plan
from trinity import device
from trinity.common.config import ConfigError
from trinity.common.config.plan.run import RunPlan
from trinity.common.config.validator import Layout, resolve_layout
from trinity.common.constants import SyncMethod
from trinity.common.models.engines import engine_actor_options
from trinity.device.selection import Selection
from trinity.launcher.placement import Placement, place

# pytest imports this file as ``cluster.test_...`` (tests/ is no package), a name Ray's workers cannot import:
# ship this module's classes and functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])



def probe_answers() -> dict[str, Any]:
    """See :func:`tests.cluster.probes.probe_answers`: a GPU worker's view."""
    return view_of_worker("CUDA_VISIBLE_DEVICES", "GPU", extra_env=("NCCL_CUMEM_ENABLE",))


def gpu_config(engine_num: int = 2, trainer_num: int = 2) -> RunPlan:
    """Return the plan of ``engine_num`` single-GPU vLLM engines and ``trainer_num`` trainer ranks on one node.

    As upstream does, the trainer gets the devices the engines leave: the node declares
    ``engine_num + trainer_num`` GPUs, whatever the cluster has (so ``engine_num=3`` over-declares the
    4-GPU node on purpose: the refusal must come from what Ray has).
    """
    return make_plan({
        "explorer.rollout_model.engine_type": "vllm",
        "explorer.rollout_model.engine_num": engine_num,
        "explorer.rollout_model.tensor_parallel_size": 1,
        "cluster": {"node_num": 1, "gpu_per_node": engine_num + trainer_num, "cpus_per_bundle": 0.5},
    })


@ray.remote
class ProbeTrainer:
    """Stands for a trainer rank: reports what it was started with."""

    def answers(self) -> dict[str, Any]:
        """See :func:`probe_answers`."""
        return probe_answers()


class ProbeEngine:
    """Stands for a vLLM engine: sets its devices' visibility itself, like ``VLLMEngine``."""

    manages_devices = True

    def answers(self) -> dict[str, Any]:
        """See :func:`probe_answers`."""
        return probe_answers()


@pytest.fixture
def cuda(gpu_cluster: Cluster) -> Selection:
    """The CUDA selection a CPU-only driver makes on the GPU cluster (re-made for each test)."""
    return select_from_cluster()


@pytest.fixture(scope="module")
def placed(gpu_cluster: Cluster) -> Iterator[tuple[RunPlan, Layout, Placement]]:
    """The plan, its layout and its placement groups (2 engines x 1 GPU, 2 trainers); removed afterwards."""
    selection = select_from_cluster()
    cfg = gpu_config()
    layout = resolve_layout(cfg, selection.backend, ray.cluster_resources())
    placement = place(cfg, layout)
    try:
        yield cfg, layout, placement
    finally:
        placement.remove()


@pytest.fixture(scope="module")
def probes(placed: tuple[RunPlan, Layout, Placement]) -> dict[str, list[dict[str, Any]]]:
    """Start the engine and trainer probes with the framework's option builders and collect their answers."""
    from trinity.trainer.trainer import worker_actor_options  # imports torch: keep it out of the workers' imports

    cfg, layout, placement = placed
    select_from_cluster()
    engines = [
        ray.remote(ProbeEngine).options(**{**engine_actor_options(cfg, ProbeEngine), **placement.engine_options(i)})
        .remote()
        for i in range(layout.engines)
    ]
    trainers = [
        ProbeTrainer.options(**worker_actor_options(cfg.cluster.cpus_per_bundle, placement.trainer_group, rank))
        .remote()
        for rank in range(layout.trainers)
    ]
    try:
        return {
            "engines": ray.get([e.answers.remote() for e in engines], timeout=120),
            "trainers": ray.get([t.answers.remote() for t in trainers], timeout=120),
        }
    finally:
        for actor in [*engines, *trainers]:
            ray.kill(actor)


class ProbeHFEngine:
    """Stands for the hf engine: Ray sets its devices' visibility, as for a trainer rank."""

    def answers(self) -> dict[str, Any]:
        """See :func:`probe_answers`."""
        return probe_answers()


@pytest.mark.parametrize("engine_cls", [ProbeEngine, ProbeHFEngine], ids=["vllm-like", "hf-like"])
def test_colocate_gives_the_engine_the_trainer_ranks_gpu(gpu_cluster: Cluster, engine_cls: type) -> None:
    """Mode colocate on the 4-GPU node: one bundle of one GPU, half of it each, so both see the same GPU.

    Runs before the module's ``placed`` groups take all 4 GPUs (tests run in file order).
    """
    from trinity.trainer.trainer import worker_actor_options

    selection = select_from_cluster()
    cfg = make_plan({"mode": "colocate", "name": f"colocate-{engine_cls.__name__}",
                     "explorer.rollout_model.engine_type": "vllm",
                     "cluster": {"node_num": 1, "gpu_per_node": 1, "cpus_per_bundle": 0.5}})
    layout = resolve_layout(cfg, selection.backend, ray.cluster_resources())
    assert layout.colocated and str(layout.sync_method) == "memory"
    placement = place(cfg, layout)
    actors: list[Any] = []
    try:
        assert placement.engine_groups == [] and placement.trainer_group.bundle_specs == [{"GPU": 1.0, "CPU": 0.5}]
        trainer = ProbeTrainer.options(**worker_actor_options(  # type: ignore[attr-defined]
            cfg.cluster.cpus_per_bundle, placement.trainer_group, 0, device_share=placement.trainer_device_share,
        )).remote()
        engine = ray.remote(engine_cls).options(
            **{**engine_actor_options(cfg, engine_cls), **placement.engine_options(0)}).remote()
        actors = [trainer, engine]
        rank, served = ray.get([trainer.answers.remote(), engine.answers.remote()], timeout=120)
        assert rank["ids"] == served["ids"] and len(rank["ids"]) == 1, (rank, served)
        assert rank["assigned_env"] == served["assigned_env"] == {"CUDA_VISIBLE_DEVICES": rank["ids"][0]}
        assert rank["node"] == served["node"]
    finally:
        for actor in actors:
            ray.kill(actor)
        placement.remove()


def test_cpu_driver_selects_cuda_from_the_cluster(cuda: Selection) -> None:
    record = device.get_backend_record("cuda")
    assert record is not None and record.backend is not None
    assert not record.backend.probe().available, "this test assumes no GPU on the driver"
    assert cuda.name == "cuda" and cuda.source == "cluster"
    assert "GPU: 4" in cuda.reason
    assert device.get_ray_resource_key() == "GPU"
    assert device.get_collective_backend() == "nccl"
    assert device.get_process_group_backend() == "cpu:gloo,cuda:nccl"
    method = SyncMethod.parse("online", collective=device.get_collective_backend())
    assert method.kind == "collective" and method.collective == "nccl"
    assert SyncMethod.parse("online") == method  # the default asks the selected backend


def test_layout_counts_gpus(cuda: Selection) -> None:
    layout = resolve_layout(gpu_config(), cuda.backend, ray.cluster_resources())
    assert layout.resource_key == "GPU"
    assert (layout.engines, layout.devices_per_engine, layout.trainers) == (2, 1, 2)
    assert str(layout.sync_method) == "nccl"


def test_more_gpus_than_the_cluster_has_is_refused(cuda: Selection) -> None:
    with pytest.raises(ConfigError, match=r"asks for 5 GPU \(3 engine\(s\) x 1 \+ 2 trainer rank\(s\)\) but the Ray "
                                          r"cluster has 4\b"):
        resolve_layout(gpu_config(engine_num=3), cuda.backend, ray.cluster_resources())


def test_placement_groups_are_single_gpu_bundles(placed: tuple[RunPlan, Layout, Placement]) -> None:
    cfg, layout, placement = placed
    assert len(placement.engine_groups) == layout.engines
    for group in placement.engine_groups:
        assert group.bundle_specs == [{"GPU": 1.0, "CPU": cfg.cluster.cpus_per_bundle}] * layout.devices_per_engine
    assert placement.trainer_group.bundle_specs == [{"GPU": 1.0, "CPU": cfg.cluster.cpus_per_bundle}] * 2
    table = ray.util.placement_group_table()
    for group in [placement.trainer_group, *placement.engine_groups]:
        assert table[group.id.hex()]["state"] == "CREATED"


def test_a_second_run_with_the_same_name_is_refused_clearly(placed: tuple[RunPlan, Layout, Placement]) -> None:
    cfg, layout, _ = placed
    with pytest.raises(ConfigError, match=r"already exists on this Ray cluster: another run"):
        place(cfg, layout)


def test_trainers_get_their_gpu_mask_from_ray(probes: dict[str, list[dict[str, Any]]]) -> None:
    trainers = probes["trainers"]
    masks = [t["visible"] for t in trainers]
    assert all(m is not None and m.isdigit() for m in masks), masks  # one id each, set by Ray
    assert len(set(masks)) == len(masks)
    for trainer in trainers:
        assert trainer["noset"] is None
        assert trainer["ids"] == [trainer["visible"]]
        assert trainer["assigned_env"] == {"CUDA_VISIBLE_DEVICES": trainer["visible"]}


def test_engines_set_their_own_mask(probes: dict[str, list[dict[str, Any]]]) -> None:
    for engine in probes["engines"]:
        assert engine["noset"] == "1"
        assert engine["visible"] is None, "Ray must leave the mask to an engine that manages its devices"
        assert len(engine["ids"]) == 1
        assert engine["assigned_env"] == {"CUDA_VISIBLE_DEVICES": engine["ids"][0]}


def test_every_gpu_is_used_once(probes: dict[str, list[dict[str, Any]]]) -> None:
    ids = [t["visible"] for t in probes["trainers"]]
    ids += [e["assigned_env"]["CUDA_VISIBLE_DEVICES"] for e in probes["engines"]]
    assert sorted(int(i) for i in ids) == [0, 1, 2, 3]


def test_workers_inherit_cuda_without_probing(probes: dict[str, list[dict[str, Any]]]) -> None:
    for answer in [*probes["engines"], *probes["trainers"]]:
        assert answer["trinity_device"] == ("cuda", "1") and answer["source"] == "driver"
        assert answer["env"]["NCCL_CUMEM_ENABLE"] == "0", "the CUDA backend's worker env sets it for weight sync"
        assert answer["device_type"] == "cuda" and answer["collective"] == "nccl"
        assert answer["pg"] == "cpu:gloo,cuda:nccl"
        assert answer["imported"] == [], f"a worker imported {answer['imported']} to answer device questions"

