"""The run's layout on a simulated Ascend cluster: a CPU-only driver, two Ray nodes advertising ``{"NPU": 8}``.

Simulated: the NPUs. The worker nodes advertise the custom resource
``{"NPU": 8}`` on this CPU-only machine, so no Ascend device exists and
nothing imports torch_npu; the driver has no device and selects the real NPU
backend (trinity-backend-npu) from the cluster's resources; the engines are
probe actors, and the last test's vLLM is the test double
(``tests/doubles/vllm_site``). Real: Ray's scheduling and placement groups
(bundles packed on one node), the ``ASCEND_RT_VISIBLE_DEVICES`` Ray writes per
actor (or leaves alone under ``RAY_EXPERIMENTAL_NOSET_...``), runtime-env
inheritance by child actors, the framework's option builders and validator,
the real ``VLLMEngine`` started through ``create_engines``, and the NPU
backend package's answers (collective, compile refusal, ascending masks).
"""

from __future__ import annotations

import math
import os
import random
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from ray import cloudpickle
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from tests.cluster.probes import probe_answers as view_of_worker
from tests.cluster.probes import select_from_cluster
from tests.plans import make_plan
from trinity import device
from trinity.common.config import ConfigError
from trinity.common.config.plan.run import RunPlan
from trinity.common.config.validator import Layout, resolve_layout
from trinity.common.constants import SyncMethod, SyncMethodError
from trinity.common.models.engines import engine_actor_options
from trinity.device.selection import Selection
from trinity.launcher.placement import Placement, place

# pytest imports this file as ``cluster.test_...`` (tests/ is no package), a name Ray's workers cannot import:
# ship this module's classes and functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

VISIBLE = "ASCEND_RT_VISIBLE_DEVICES"
NOSET = f"RAY_EXPERIMENTAL_NOSET_{VISIBLE}"


def npu_config(**overrides: Any) -> RunPlan:
    """Return the plan of a run on the two 8-NPU nodes (0.25 CPU per bundle) with dotted ``overrides`` applied.

    ``trainer.use_torch_compile`` is left unset: the backend decides.
    """
    return make_plan({"cluster": {"node_num": 2, "gpu_per_node": 8, "cpus_per_bundle": 0.25},
                      "trainer.use_torch_compile": None, **overrides})


def tp_config() -> RunPlan:
    """Two vLLM engines of tensor-parallel size 4 and four trainer ranks: 12 of the cluster's 16 NPUs.

    As upstream does, the trainer gets the devices the engines leave, so the run declares the 12 it uses;
    as 3 nodes of 4 (each group fits one), which leaves 4 NPUs free for this module's later tests.
    """
    return npu_config(**{
        "cluster.node_num": 3, "cluster.gpu_per_node": 4,
        "explorer.rollout_model.engine_type": "vllm", "explorer.rollout_model.engine_num": 2,
        "explorer.rollout_model.tensor_parallel_size": 4,
    })


def probe_answers() -> dict[str, Any]:
    """See :func:`tests.cluster.probes.probe_answers`: an NPU worker's view."""
    return view_of_worker(VISIBLE, "NPU")


class ProbeWorker:
    """Stands for a vLLM Ray-executor worker: one NPU of the engine's placement group."""

    def answers(self) -> dict[str, Any]:
        """See :func:`probe_answers`."""
        return probe_answers()


class ProbeEngine:
    """Stands for a vLLM engine: sets its devices' visibility itself (``manages_devices``), like ``VLLMEngine``."""

    manages_devices = True

    def answers(self) -> dict[str, Any]:
        """See :func:`probe_answers`."""
        return probe_answers()

    def start_workers(self, tensor_parallel_size: int, seed: int) -> dict[str, Any]:
        """Do what vLLM's Ray executor does: one worker per bundle of the current group; build their mask.

        The workers' ids are passed to the mask builder in a shuffled order
        (``seed``): the backend must still write them ascending.
        """
        import trinity.device as worker_device

        group = ray.util.get_current_placement_group()
        assert group is not None, "the engine's options must capture its child actors in its group"
        workers = [
            ray.remote(ProbeWorker).options(
                num_cpus=0,
                resources={"NPU": 1},
                scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i),
            ).remote()
            for i in range(tensor_parallel_size)
        ]
        try:
            answers = ray.get([w.answers.remote() for w in workers], timeout=120)
        finally:
            for worker in workers:
                ray.kill(worker)
        ids = [int(i) for a in answers for i in a["ids"]]
        random.Random(seed).shuffle(ids)
        return {
            "group": group.id.hex(),
            "engine": probe_answers(),
            "workers": answers,
            "shuffled": ids,
            "mask": worker_device.visible_devices_env(ids),
        }


@pytest.fixture
def npu(npu_cluster: Cluster) -> Selection:
    """The NPU selection a CPU-only driver makes on the cluster (re-made for each test)."""
    selection = select_from_cluster()
    assert selection.name == "npu" and selection.source == "cluster"
    return selection


@pytest.fixture(scope="module")
def placed(npu_cluster: Cluster) -> Iterator[tuple[RunPlan, Layout, Placement]]:
    """The tensor-parallel run's config, layout and placement groups; removed afterwards."""
    cfg = tp_config()
    layout = resolve_layout(cfg, select_from_cluster().backend, ray.cluster_resources())
    placement = place(cfg, layout)
    try:
        yield cfg, layout, placement
    finally:
        placement.remove()


@pytest.fixture(scope="module")
def engine_runs(placed: tuple[RunPlan, Layout, Placement]) -> list[dict[str, Any]]:
    """Start each tp-4 engine probe in its group and let it start its workers; their answers."""
    cfg, layout, placement = placed
    select_from_cluster()
    engines = [
        ray.remote(ProbeEngine).options(**{**engine_actor_options(cfg, ProbeEngine), **placement.engine_options(i)})
        .remote()
        for i in range(layout.engines)
    ]
    try:
        return ray.get([e.start_workers.remote(layout.devices_per_engine, i) for i, e in enumerate(engines)],
                       timeout=180)
    finally:
        for engine in engines:
            ray.kill(engine)


@pytest.fixture(scope="module")
def trainer_answers(placed: tuple[RunPlan, Layout, Placement]) -> list[dict[str, Any]]:
    """Start one probe per trainer rank with the trainer's own option builder; their answers."""
    from trinity.trainer.trainer import worker_actor_options  # imports torch: keep it out of the workers' imports

    cfg, layout, placement = placed
    select_from_cluster()
    probe = ray.remote(ProbeWorker)
    trainers = [
        probe.options(**worker_actor_options(cfg.cluster.cpus_per_bundle, placement.trainer_group, rank)).remote()
        for rank in range(layout.trainers)
    ]
    try:
        return ray.get([t.answers.remote() for t in trainers], timeout=120)
    finally:
        for trainer in trainers:
            ray.kill(trainer)


# --- the validator with the real NPU backend ----------------------------------------------------------------


def test_compile_is_turned_off_when_unset(npu: Selection) -> None:
    layout = resolve_layout(tp_config(), npu.backend, ray.cluster_resources())
    assert layout.use_torch_compile is False
    assert layout.resource_key == "NPU" and layout.engines * layout.devices_per_engine + layout.trainers == 12


def test_explicit_compile_is_refused_with_the_npu_backends_reason(npu: Selection) -> None:
    from trinity_backend_npu.info import COMPILE_SUPPORT

    cfg = npu_config(**{"trainer.use_torch_compile": True})
    with pytest.raises(ConfigError, match=re.escape(f"not supported on the npu backend: {COMPILE_SUPPORT.reason}")):
        resolve_layout(cfg, npu.backend, ray.cluster_resources())
    assert npu.backend.compile_support().reason == COMPILE_SUPPORT.reason


def test_online_sync_is_hccl_and_nccl_is_refused(npu: Selection) -> None:
    assert str(resolve_layout(tp_config(), npu.backend, ray.cluster_resources()).sync_method) == "hccl"
    assert SyncMethod.parse("online") == SyncMethod("collective", "hccl")
    with pytest.raises(SyncMethodError, match="collective is 'hccl'"):
        SyncMethod.parse("nccl")


# --- tensor-parallel engines --------------------------------------------------------------------------------


def test_each_engine_group_is_packed_on_one_node(placed: tuple[RunPlan, Layout, Placement]) -> None:
    cfg, _, placement = placed
    assert len(placement.engine_groups) == 2
    for group in placement.engine_groups:
        assert group.bundle_specs == [{"NPU": 1.0, "CPU": cfg.cluster.cpus_per_bundle}] * 4
        table = ray.util.placement_group_table(group)
        assert table["strategy"] == "STRICT_PACK" and table["state"] == "CREATED"
        assert len(set(table["bundles_to_node_id"].values())) == 1


def test_engine_group_is_captured_and_holds_no_npu_itself(
    placed: tuple[RunPlan, Layout, Placement], engine_runs: list[dict[str, Any]]
) -> None:
    _, _, placement = placed
    assert [run["group"] for run in engine_runs] == [g.id.hex() for g in placement.engine_groups]
    for run in engine_runs:
        engine = run["engine"]
        assert engine["ids"] == [] and engine["assigned_env"] == {}
        assert engine["noset"] == "1" and engine["visible"] is None
        assert engine["source"] == "driver" and engine["device_type"] == "npu"


def test_tp_workers_share_a_node_and_get_no_mask_from_ray(engine_runs: list[dict[str, Any]]) -> None:
    for run in engine_runs:
        workers = run["workers"]
        assert len(workers) == 4
        assert {w["node"] for w in workers} == {run["engine"]["node"]}
        for worker in workers:
            assert worker["noset"] == "1", "child actors inherit the engine's runtime env"
            assert worker["visible"] is None
            assert len(worker["ids"]) == 1
            assert worker["imported"] == []


def test_engine_builds_an_ascending_mask_of_its_workers(engine_runs: list[dict[str, Any]]) -> None:
    for run in engine_runs:
        ids = sorted(int(w["ids"][0]) for w in run["workers"])
        assert len(set(ids)) == 4 and all(0 <= i < 8 for i in ids)
        assert run["mask"] == {VISIBLE: ",".join(str(i) for i in ids)}
    assert any(run["shuffled"] != sorted(run["shuffled"]) for run in engine_runs), "shuffle did not shuffle"


# --- trainers ---------------------------------------------------------------------------------------------------


def test_trainers_get_one_npu_each_from_ray(trainer_answers: list[dict[str, Any]]) -> None:
    assert len(trainer_answers) == 4
    assert len({t["node"] for t in trainer_answers}) == 1, "4 trainer bundles fit a node: STRICT_PACK"
    masks = [t["visible"] for t in trainer_answers]
    assert all(m is not None and m.isdigit() for m in masks), masks
    assert len(set(masks)) == 4
    for trainer in trainer_answers:
        assert trainer["noset"] is None and trainer["ids"] == [trainer["visible"]]
        assert trainer["pg"] == "cpu:gloo,npu:hccl" and trainer["collective"] == "hccl"
        assert trainer["source"] == "driver" and trainer["imported"] == []


def test_no_npu_is_given_twice(trainer_answers: list[dict[str, Any]], engine_runs: list[dict[str, Any]]) -> None:
    taken = [(t["node"], int(t["visible"])) for t in trainer_answers]
    taken += [(w["node"], int(w["ids"][0])) for run in engine_runs for w in run["workers"]]
    assert len(taken) == 12 and len(set(taken)) == 12


# --- a tensor-parallel-1 engine -----------------------------------------------------------------------------


def test_tp1_engine_holds_one_npu_and_writes_its_own_mask(npu: Selection) -> None:
    cfg = npu_config(**{"name": "tp1", "mode": "explore", "explorer.rollout_model.engine_type": "vllm",
                        "explorer.rollout_model.engine_num": 1, "explorer.rollout_model.tensor_parallel_size": 1})
    layout = resolve_layout(cfg, npu.backend, ray.cluster_resources())
    assert layout.trainers == 0
    placement = place(cfg, layout)
    try:
        options = {**engine_actor_options(cfg, ProbeEngine), **placement.engine_options(0)}
        assert options["resources"] == {"NPU": 1}
        engine = ray.remote(ProbeEngine).options(**options).remote()
        answer = ray.get(engine.answers.remote(), timeout=120)
        ray.kill(engine)
    finally:
        placement.remove()
    assert answer["noset"] == "1" and answer["visible"] is None
    assert len(answer["ids"]) == 1
    assert answer["assigned_env"] == {VISIBLE: answer["ids"][0]}
    assert answer["pg"] == "cpu:gloo,npu:hccl" and answer["imported"] == []


# --- the real vLLM engine (with the vLLM double) through create_engines --------------------------------------


def double_facts(engine: Any) -> dict[str, Any]:
    """Run inside a ``VLLMEngine`` actor (through ``__ray_call__``): what the vLLM double and the actor recorded."""
    import vllm

    core = engine.engine
    group = ray.util.get_current_placement_group()
    return {
        "is_double": bool(getattr(vllm, "IS_TRINITY_DOUBLE", False)),
        "bundles": core.placement_group_bundles,
        "executor": core.executor_backend,
        "workers": len(core.double_workers),
        "group": group.id.hex() if group is not None else None,
        "noset": os.environ.get(NOSET),
        "visible": os.environ.get(VISIBLE),
        "source": device.current_selection().source,
    }


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model folder (built once per session, shared with the engine tests)."""
    from tests.models.tiny_fixtures import tiny_path

    return tiny_path(tmp_path_factory)


def test_vllm_engine_runs_tensor_parallel_on_the_npu_cluster(npu: Selection, tiny_model: Path) -> None:
    from tests.doubles.vllm_path import SITE
    from trinity.common.models.engine import SamplingParams
    from trinity.common.models.engines import ENGINES, create_engines, shutdown_engines

    cfg = npu_config(**{"name": "vllm-tp2", "mode": "explore", "model.model_path": str(tiny_model),
                        "explorer.rollout_model.engine_type": "vllm", "explorer.rollout_model.engine_num": 1,
                        "explorer.rollout_model.tensor_parallel_size": 2})
    layout = resolve_layout(cfg, npu.backend, ray.cluster_resources())
    placement = place(cfg, layout)
    engines: list[Any] = []
    try:
        # the driver loads the engine class without vLLM (a CPU head node); the actor imports it
        assert "vllm" not in sys.modules
        engine_cls = ENGINES.get(layout.engine_type)()  # loading the class imports no vLLM
        runtime_env = engine_actor_options(cfg, engine_cls)["runtime_env"]
        # the double must be importable in the actor: add it to the worker env, keeping the backend's variables
        env_vars = {**runtime_env["env_vars"], "PYTHONPATH": str(SITE)}
        engines = create_engines(cfg, layout.engine_type, options_for=placement.engine_options,
                                 runtime_env={**runtime_env, "env_vars": env_vars})
        (engine,) = engines
        described = ray.get(engine.describe.remote(), timeout=180)
        ranks = ray.get(engine.weight_sync_ranks.remote(), timeout=60)
        facts = ray.get(engine.__ray_call__.remote(double_facts), timeout=60)
        completions = ray.get(
            engine.generate.remote(["What is 1 plus 2?"], SamplingParams(max_tokens=6, n=2, seed=3)), timeout=120
        )
        ray.get(engine.shutdown.remote(), timeout=60)
    finally:
        shutdown_engines(engines)
        placement.remove()

    assert described["executor"] == "ray" and described["tensor_parallel_size"] == 2
    assert described["device_type"] == "npu" and ranks == 2
    assert facts["is_double"] and facts["executor"] == "ray" and facts["workers"] == 2
    assert facts["bundles"] == [{"NPU": 1.0, "CPU": cfg.cluster.cpus_per_bundle}] * 2
    assert facts["group"] == placement.engine_groups[0].id.hex()
    assert facts["noset"] == "1" and facts["visible"] is None
    assert facts["source"] == "driver"
    assert len(completions) == 1 and len(completions[0]) == 2
    for completion in completions[0]:
        assert 0 < len(completion.response_tokens) <= 6
        assert len(completion.logprobs) == len(completion.response_tokens)
        assert all(math.isfinite(float(x)) and float(x) <= 0 for x in completion.logprobs)
