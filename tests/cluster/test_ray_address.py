"""``trinity run`` goes where Ray's addresses say: ``RAY_ADDRESS`` (and so ``ray job submit``), ``local``, ``auto``.

The clusters here are real (``ray.cluster_utils.Cluster``: several raylets on
this machine) and record themselves only in a private Ray temp dir, as a
cluster looks from a submit node: nothing where a default ``ray.init()``
looks, so only ``RAY_ADDRESS`` can lead a run there. Simulated: the devices
(the example vendor's ``{"ACME": 2}`` nodes, whose device files only the
raylets see).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.cluster_utils import Cluster

from tests.ray_hygiene import private_ray_record
from trinity.common.ray_connect import RAY_ADDRESS_ENV, connect, disconnect, effective_address

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart" / "cpu.yaml"
TWO_STEPS = ["--set", "buffer.total_steps=2", "--set", "monitor.progress=false", "--set", "monitor.plot=false"]


def test_the_address_a_run_uses() -> None:
    assert effective_address("10.0.0.5:6379", {RAY_ADDRESS_ENV: "10.0.0.9:6379"}) == ("10.0.0.5:6379",
                                                                                      "cluster.ray_address")
    assert effective_address("auto", {RAY_ADDRESS_ENV: "10.0.0.9:6379"}) == ("10.0.0.9:6379", RAY_ADDRESS_ENV)
    assert effective_address("", {RAY_ADDRESS_ENV: "local"}) == ("local", RAY_ADDRESS_ENV)
    assert effective_address("auto", {}) == ("auto", "default")
    assert effective_address("local", {RAY_ADDRESS_ENV: "10.0.0.9:6379"}) == ("local", "cluster.ray_address")


@contextmanager
def unrecorded_cluster(nodes: list[dict[str, Any]], acme_dir: Path | None = None, **head: Any) -> Iterator[Cluster]:
    """A cluster recorded only in a private Ray temp dir (removed afterwards); this process does not join it."""
    with pytest.MonkeyPatch.context() as patch, private_ray_record():
        patch.setenv("RAY_AUTH_MODE", "disabled")
        if acme_dir is not None:
            patch.setenv("ACME_DEVICE_DIR", str(acme_dir))  # inherited by the raylets only
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False, **head})
        try:
            for node in nodes:
                cluster.add_node(**node)
            cluster.wait_for_nodes()
            yield cluster
        finally:
            cluster.shutdown()


def run_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a user's shell: no Ray temp dir of the tests, the run folder under ``tmp_path``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_TMPDIR", "RAY_ADDRESS", "ACME_DEVICE_DIR", "TRINITY_DEVICE", "TRINITY_MODEL_PATH")}
    return {**env, "TRINITY_CHECKPOINT_ROOT_DIR": str(tmp_path / "ckpt"), "RAY_AUTH_MODE": "disabled", **extra}


def trinity(*args: str, env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trinity.cli.main", *args], cwd=REPO, env=env, text=True,
                          capture_output=True, timeout=timeout, check=False)


def device_json(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "ckpt" / "quickstart" / "toy-repeat-grpo" / "device.json").read_text())


def test_ray_address_alone_takes_the_run_to_a_two_node_custom_key_cluster(tmp_path: Path, acme_dir: Path) -> None:
    with unrecorded_cluster([{"num_cpus": 4, "resources": {"ACME": 2}}] * 2, acme_dir) as cluster:
        done = trinity("run", "--config", str(QUICKSTART), *TWO_STEPS, "--set", "cluster.node_num=2",
                       "--set", "explorer.rollout_model.engine_num=2",
                       env=run_env(tmp_path, RAY_ADDRESS=cluster.address))
        address = cluster.address
    assert done.returncode == 0, done.stderr[-3000:]
    record = device_json(tmp_path)
    assert record["ray"] == {"address": address, "from": "RAY_ADDRESS", "started_here": False}
    assert record["backend"] == "acme" and record["selection_source"] == "cluster"
    placed = {(a["node_id"], a["devices"][0]) for a in record["actors"]}
    assert len(placed) == 4 and len({node for node, _ in placed}) == 2  # both device nodes, every device once


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_ray_address_where_nothing_listens_is_one_line_and_exit_2(tmp_path: Path) -> None:
    port = closed_port()
    env = run_env(tmp_path, RAY_ADDRESS=f"127.0.0.1:{port}")
    done = trinity("run", "--config", str(QUICKSTART), *TWO_STEPS, env=env, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0] and "from RAY_ADDRESS" in lines[0], done.stderr
    assert not (tmp_path / "ckpt" / "quickstart" / "toy-repeat-grpo" / "device.json").exists()


def test_ray_address_local_starts_afresh_beside_a_recorded_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    with unrecorded_cluster([]) as cluster:  # recorded in the private temp dir this block's ray.init reads
        monkeypatch.setenv(RAY_ADDRESS_ENV, "local")
        connection = connect("auto", num_cpus=1)
        try:
            joined = ray.get_runtime_context().gcs_address  # type: ignore[no-untyped-call]
        finally:
            disconnect(connection)
        monkeypatch.setenv(RAY_ADDRESS_ENV, "auto")
        auto = connect("auto")
        try:
            recorded = ray.get_runtime_context().gcs_address  # type: ignore[no-untyped-call]
        finally:
            disconnect(auto)
        address = cluster.address
    assert connection.started_here and connection.origin == RAY_ADDRESS_ENV and joined != address
    assert not auto.started_here and recorded == address  # auto: the running local cluster


def test_ray_job_submit_runs_the_quickstart_on_the_cluster_it_was_submitted_to(tmp_path: Path) -> None:
    dashboard = closed_port()  # free now; the dashboard takes it
    with unrecorded_cluster([{"num_cpus": 4}], include_dashboard=True, dashboard_host="127.0.0.1",
                            dashboard_port=dashboard) as cluster:
        address = cluster.address
        env = run_env(tmp_path)
        entrypoint = (f"cd {REPO} && {sys.executable} -m trinity.cli.main run --config {QUICKSTART} "
                      + " ".join(TWO_STEPS))
        runtime = json.dumps({"env_vars": {"TRINITY_CHECKPOINT_ROOT_DIR": str(tmp_path / "ckpt")}})
        done = subprocess.run(
            [sys.executable, "-m", "ray.scripts.scripts", "job", "submit", "--address",
             f"http://127.0.0.1:{dashboard}", "--runtime-env-json", runtime, "--", "bash", "-c", entrypoint],
            env=env, text=True, capture_output=True, timeout=300, check=False)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-2000:])
    record = device_json(tmp_path)
    assert record["ray"]["from"] == "RAY_ADDRESS" and not record["ray"]["started_here"]
    assert record["ray"]["address"].rsplit(":", 1)[-1] == address.rsplit(":", 1)[-1]  # the cluster's GCS port
