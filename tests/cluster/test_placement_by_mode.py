"""Every mode reserves placement groups for the actors it starts, runs them there, and removes the groups after.

Simulated: the devices. A CPU-only head (the driver's node) plus two raylets
advertising ``{"ACME": 2}`` with 3 CPUs each (the example vendor backend
trinity-backend-acme, a resource key Ray assigns no ids for; its device
nodes are empty files under ``ACME_DEVICE_DIR``, visible to the raylets
only). Real: Ray's placement groups and scheduling, each actor's own answer
to "which placement group am I in" (recorded in ``<run>/device.json``),
``trinity run`` in modes explore, train and bench on one run folder (a
SQLite buffer between them, the tiny model, the gloo trainer ranks).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.util.placement_group import placement_group_table

from tests.cluster.simulated import simulated_cluster
from tests.e2e.test_run_both import job_config
from trinity import device
from trinity.common.config import parse_config
from trinity.common.models.placement import PlacementError, create_placement_group
from trinity.errors import EXIT_USAGE
from trinity.launcher import run_plan
from trinity.launcher.bench import BENCH_DIR
from trinity.planner.run import resolve_run

NODE = {"num_cpus": 3, "resources": {"ACME": 2}}


@pytest.fixture(scope="module")
def acme_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The cluster (module-wide); yields a scratch folder. Acme's device folder is visible to the raylets only."""
    scratch = tmp_path_factory.mktemp("placement")
    devices = scratch / "acme-dev"
    devices.mkdir()
    for index in range(2):
        (devices / f"acme{index}").touch()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ACME_DEVICE_DIR", str(devices))  # inherited by the raylets started below
        for name in ("TRINITY_DEVICE", "RAY_ADDRESS"):
            patch.delenv(name, raising=False)
        with simulated_cluster(1, [NODE, NODE]):
            patch.delenv("ACME_DEVICE_DIR")  # the driver's node has no Acme device: the cluster decides
            claimed = [device.assignment.claims_folder(n["NodeID"], "ACME").parent
                       for n in ray.nodes()]  # type: ignore[no-untyped-call]
            yield scratch
    for folder in claimed:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model folder (built once per session)."""
    from tests.models.tiny_fixtures import tiny_path

    return tiny_path(tmp_path_factory)


def mode_plan(scratch: Path, model: Path, mode: str, **overrides: object) -> Any:
    """A small toy_repeat job of ``mode`` on the Acme nodes: one run folder, a SQLite buffer between the jobs."""
    raw = job_config(scratch, model, **{
        "mode": mode,
        "name": "placed",
        "buffer.total_steps": 1,
        "buffer.explorer_input.eval_tasksets": [],
        "buffer.trainer_input.experience_buffer": {"name": "experience", "storage_type": "sql",
                                                   "max_read_timeout": 30.0},
        "cluster.node_num": 1,
        "cluster.gpu_per_node": 2,
        "synchronizer.verify_checksums": False,
        "monitor.plot": False,
        **overrides,
    })
    return resolve_run(parse_config(raw))


def groups_of(plan: Any, before: Collection[str] = ()) -> dict[str, dict[str, Any]]:
    """The placement groups (live or removed) of this run not in ``before``, by their name after the run's prefix."""
    prefix = f"{plan.ray_namespace}/{plan.run_dir.name}/"
    return {g["name"][len(prefix):]: g for key, g in placement_group_table().items()
            if g["name"].startswith(prefix) and key not in before}


def actors_of(plan: Any) -> list[dict[str, Any]]:
    """The actor entries of the job's ``device.json`` (a bench job keeps its own under ``bench/``)."""
    folder = plan.run_dir / BENCH_DIR if plan.config.mode == "bench" else plan.run_dir
    return list(json.loads((folder / "device.json").read_text())["actors"])


@pytest.fixture(scope="module")
def runs(acme_cluster: Path, tiny_model: Path) -> dict[str, tuple[Any, list[dict[str, Any]], dict[str, Any]]]:
    """Explore (2 engines), train on what it wrote (2 ranks), bench (an engine and an auxiliary model) in turn.

    For each mode: its plan, its actors as ``device.json`` records them, and the placement groups the job
    created, as they are once it is over.
    """
    out = {}
    jobs: dict[str, dict[str, Any]] = {
        "explore": {"cluster.node_num": 2, "explorer.rollout_model.engine_num": 2},
        "train": {},
        "bench": {"buffer.explorer_input.eval_tasksets": [{
            "name": "eval", "path": str(Path(__file__).resolve().parents[2] / "examples" / "quickstart" / "tasks"
                                        / "eval.jsonl"),
            "format": {"prompt_key": "question", "response_key": "answer"}, "rollout_args": {"temperature": 0.0}}],
            "explorer.bench_on_latest_checkpoint": True,
            "explorer.auxiliary_models": [{"name": "judge", "model_path": str(tiny_model), "engine_num": 1,
                                           "dtype": "float32"}]},
    }
    for mode, overrides in jobs.items():
        plan = mode_plan(acme_cluster, tiny_model, mode, **overrides)
        before = set(placement_group_table())
        assert run_plan(plan) == 0
        out[mode] = (plan, actors_of(plan), groups_of(plan, before))
    return out


def test_explore_runs_each_engine_in_its_own_group(runs: dict[str, Any]) -> None:
    plan, actors, groups = runs["explore"]
    assert sorted(groups) == ["engine-0", "engine-1"], "an explore job reserves no trainer group"
    assert [a["name"] for a in actors] == ["rollout-0", "rollout-1"]
    for index, actor in enumerate(actors):
        group = groups[f"engine-{index}"]
        assert actor["placement_group_id"] == group["placement_group_id"]
        assert group["bundles"] == {0: {"ACME": 1.0, "CPU": plan.cluster.cpus_per_bundle}}
        assert group["bundles_to_node_id"][0] == actor["node_id"]


def test_train_runs_its_ranks_in_one_group_on_one_node(runs: dict[str, Any]) -> None:
    _, actors, groups = runs["train"]
    assert sorted(groups) == ["trainer"], "a train job reserves the trainer's group only"
    assert [a["name"] for a in actors] == ["trainer-0", "trainer-1"]
    trainer = groups["trainer"]
    assert trainer["strategy"] == "STRICT_PACK" and len(trainer["bundles"]) == 2
    assert {a["placement_group_id"] for a in actors} == {trainer["placement_group_id"]}
    nodes = {a["node_id"] for a in actors}
    assert len(nodes) == 1 and nodes == set(trainer["bundles_to_node_id"].values())
    assert sorted(d for a in actors for d in a["devices"]) == [0, 1]


def test_bench_runs_its_engines_and_auxiliary_models_in_their_groups(runs: dict[str, Any]) -> None:
    _, actors, groups = runs["bench"]
    assert sorted(groups) == ["engine-0", "judge-0"], "a bench job reserves no trainer group"
    by_name = {a["name"]: a["placement_group_id"] for a in actors}
    assert by_name == {"rollout-0": groups["engine-0"]["placement_group_id"],
                       "judge-0": groups["judge-0"]["placement_group_id"]}


def test_every_group_is_removed_when_its_job_ends(runs: dict[str, Any]) -> None:
    for mode, (_, actors, groups) in runs.items():
        assert groups and all(g["state"] == "REMOVED" for g in groups.values()), mode
        assert all(a["placement_group_id"] for a in actors), mode


def test_an_infeasible_trainer_group_fails_at_once_with_one_line(
    acme_cluster: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two ranks of 2 CPUs each on one node: the cluster has 7 CPUs, but no node more than 3."""
    from trinity.cli.main import main

    config = job_config(acme_cluster, tiny_model, **{
        "mode": "train", "name": "too-big", "buffer.total_steps": 1,
        "buffer.trainer_input.experience_buffer": {"name": "experience", "storage_type": "sql"},
        "cluster.node_num": 1, "cluster.gpu_per_node": 2, "cluster.cpus_per_bundle": 2.0,
    })
    path = acme_cluster / "too-big.yaml"
    path.write_text(json.dumps(config), encoding="utf-8")
    started = time.monotonic()
    status = main(["run", "--config", str(path)])
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err.strip().splitlines()
    assert status == EXIT_USAGE
    assert elapsed < 60, "infeasible: no waiting out the 120 s placement timeout"
    (line,) = [e for e in err if e.startswith("trinity: error:")]
    assert "placement group e2e/too-big/too-big/trainer of 2 x {'ACME': 1.0, 'CPU': 2.0} (STRICT_PACK)" in line
    assert "no node of the Ray cluster could ever hold it" in line and "cluster.cpus_per_bundle" in line
    plan = resolve_run(parse_config(config))
    assert {g["state"] for g in groups_of(plan).values()} == {"REMOVED"}


def test_a_group_the_busy_cluster_cannot_hold_times_out_and_is_removed(acme_cluster: Path) -> None:
    hold = create_placement_group(4, "ACME", 0.5, 2, name="test/busy/hold")  # every ACME device of the cluster
    try:
        started = time.monotonic()
        with pytest.raises(PlacementError, match=r"could not be placed within 1 s; the cluster has .* free"):
            create_placement_group(1, "ACME", 0.5, 2, name="test/busy/late", timeout_s=1.0)
        assert time.monotonic() - started < 30
    finally:
        ray.util.remove_placement_group(hold)
    (late,) = [g for g in placement_group_table().values() if g["name"] == "test/busy/late"]
    assert late["state"] == "REMOVED"


def test_a_group_interrupted_while_waiting_is_removed(acme_cluster: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(ray, "wait", interrupted)
    with pytest.raises(KeyboardInterrupt):
        create_placement_group(1, "ACME", 0.5, 2, name="test/interrupted")
    monkeypatch.undo()
    (group,) = [g for g in placement_group_table().values() if g["name"] == "test/interrupted"]
    assert group["state"] == "REMOVED"
