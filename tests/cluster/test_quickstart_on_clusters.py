"""The CPU quickstart, unchanged, on a GPU node, an NPU node and a node of a vendor's own resource key.

Simulated: the devices. A CPU-only head (the driver's node, where no
accelerator is found) plus raylets advertising ``{"GPU": 2}``, ``{"NPU": 2}``
or ``{"ACME": 2}`` (the example vendor backend trinity-backend-acme, whose
device nodes are empty files under ``ACME_DEVICE_DIR``, visible to the
raylets only). Real: Ray, the backend chosen from the cluster's resources,
the layout ``trinity run`` resolves for ``examples/quickstart/cpu.yaml``, and
on the Acme cluster a whole ``trinity run`` of it (two steps) with its
``device.json``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import ray

from tests.cluster.conftest import simulated_cluster
from trinity import device
from trinity.common.config import load_config
from trinity.launcher.session import open_session
from trinity.planner.run import resolve_run

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart" / "cpu.yaml"

#: node resources, then what the run decides: backend, resource key, engine type, collective.
CLUSTERS: dict[str, tuple[dict[str, Any], str, str, str, str]] = {
    "gpu": ({"num_cpus": 4, "num_gpus": 2}, "cuda", "GPU", "vllm", "nccl"),
    "npu": ({"num_cpus": 4, "resources": {"NPU": 2}}, "npu", "NPU", "vllm", "hccl"),
    "acme": ({"num_cpus": 4, "resources": {"ACME": 2}}, "acme", "ACME", "hf", "gloo"),
}


@pytest.fixture
def quickstart_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Point the quickstart's run folder (and so its tiny model) at ``tmp_path``; run from the repository root."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path / "ckpt"))
    for name in ("TRINITY_MODEL_PATH", "TRINITY_TASKSET_PATH", "TRINITY_DEVICE", "RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@contextmanager
def cluster_of(kind: str, nodes: int, acme_dir: Path) -> Iterator[None]:
    """A CPU-only head plus ``nodes`` raylets of ``kind``; Acme's device folder is visible to the raylets only."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ACME_DEVICE_DIR", str(acme_dir))  # inherited by the raylets started below
        with simulated_cluster(1, [CLUSTERS[kind][0]] * nodes):
            patch.delenv("ACME_DEVICE_DIR")  # the driver's node has no Acme device: the cluster decides
            claimed = [device.assignment.claims_folder(n["NodeID"], "ACME").parent for n in ray.nodes()]
            yield
    for folder in claimed:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("kind", list(CLUSTERS))
def test_the_quickstart_lays_out_on_one_node_of_any_kind(kind: str, quickstart_env: Path, acme_dir: Path) -> None:
    _, backend, key, engine_type, collective = CLUSTERS[kind]
    with cluster_of(kind, 1, acme_dir):
        session = open_session(resolve_run(load_config(QUICKSTART)))
        try:
            layout, selection = session.layout, session.selection
        finally:
            session.close()
    assert selection.name == backend and selection.source == "cluster"
    assert (layout.resource_key, layout.engine_type, str(layout.sync_method)) == (key, engine_type, collective)
    assert (layout.nodes, layout.devices_per_node, layout.engines, layout.trainers) == (1, 2, 1, 1)


def test_the_quickstart_lays_out_on_a_custom_key_machine_without_a_cluster(
    quickstart_env: Path, acme_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACME_DEVICE_DIR", str(acme_dir))
    monkeypatch.setenv("RAY_ADDRESS", "local")  # no cluster to join: trinity starts its own Ray here
    assert not ray.is_initialized()
    try:
        session = open_session(resolve_run(load_config(QUICKSTART)))
        try:
            offered = ray.cluster_resources().get("ACME")  # type: ignore[no-untyped-call]
        finally:
            session.close()
        assert not ray.is_initialized()
    finally:
        device.reset()
    assert offered == 2  # the local probe's devices, declared to the Ray node trinity started
    assert (session.selection.name, session.selection.source) == ("acme", "auto")
    assert (session.layout.resource_key, session.layout.engine_type) == ("ACME", "hf")
    assert (session.layout.devices_per_node, session.layout.engines, session.layout.trainers) == (2, 1, 1)


def test_devices_per_node_auto_takes_the_node_s_devices(quickstart_env: Path, acme_dir: Path) -> None:
    with cluster_of("acme", 1, acme_dir):
        config = load_config(QUICKSTART, {"cluster.gpu_per_node": 0, "cluster.node_num": 0})
        session = open_session(resolve_run(config))
        session.close()
    assert session.layout.source == "detected from the cluster"
    assert (session.layout.nodes, session.layout.devices_per_node, session.layout.trainers) == (1, 2, 1)


def test_the_quickstart_runs_on_two_custom_key_nodes_and_records_its_devices(
    quickstart_env: Path, acme_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from trinity.launcher import run_job

    caplog.set_level("INFO", logger="trinity.launcher")
    with cluster_of("acme", 2, acme_dir):
        nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"] and "ACME" in n["Resources"]}
        overrides = {"buffer.total_steps": 2, "cluster.node_num": 2, "explorer.rollout_model.engine_num": 2,
                     "monitor.progress": False}
        assert run_job(QUICKSTART, overrides) == 0
    run_dir = quickstart_env / "ckpt" / "quickstart" / "toy-repeat-grpo"
    record = json.loads((run_dir / "device.json").read_text())
    assert record["backend"] == "acme" and record["selection_source"] == "cluster"
    assert "the Ray cluster offers ACME" in record["selection_reason"]
    assert (record["collective"], record["process_group_backend"]) == ("gloo", "cpu:gloo")
    actors = record["actors"]
    assert sorted(a["name"] for a in actors) == ["rollout-0", "rollout-1", "trainer-0", "trainer-1"]
    placed = [(a["node_id"], a["devices"][0]) for a in actors]
    assert len(set(placed)) == 4 and {node for node, _ in placed} == nodes  # 2 nodes x 2 devices, none shared
    for actor in actors:
        assert actor["source"] == "claimed" and actor["visible_devices"] == str(actor["devices"][0])
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("device: acme")]
    assert "collective gloo; trainer 2 rank(s) on devices" in line and "rollout-1 [" in line
    assert [r for r in (json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines())
            if r["phase"] == "train"]
