"""End to end: mode colocate on the CPU — one engine and one trainer rank sharing one CPU bundle, chosen for
``mode: both`` on one device, the weights handed over through a shared-memory file, checked by checksum."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_run_both import job_config, records

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trinity.common.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("model") / "tiny")


def trinity_run(config: dict, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``trinity run --config`` on ``config`` as a user does, in a subprocess with its own local Ray cluster."""
    config_file = tmp_path / "job.yaml"
    config_file.write_text(yaml.safe_dump(config))
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run([sys.executable, "-m", "trinity.cli.main", "run", "--config", str(config_file), *args],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=600, check=False)


def test_both_on_one_bundle_runs_colocated_and_the_engine_serves_each_steps_weights(
    tmp_path: Path, tiny_model: Path
) -> None:
    config = job_config(tmp_path, tiny_model, **{"cluster.gpu_per_node": 1})
    done = trinity_run(config, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    warnings = [line for line in done.stderr.splitlines() if line.startswith("trinity: warning:")]
    assert len(warnings) == 1 and "running as mode colocate" in warnings[0], done.stderr[-3000:]

    run_dir = tmp_path / "ckpt" / "e2e" / "run"
    train = [r for r in records(run_dir) if r["phase"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3]
    for record in train:  # the engine holds the trainer's weights after every handover
        assert record["metrics"]["sync/checksum_match"] == 1.0
        # written by the trainer rank within its step's call: the serial loop's sync makes no call of its own
        assert record["metrics"]["sync/written_in_step"] == 1.0
        assert record["metrics"]["loss"] == record["metrics"]["loss"]
    chosen = json.loads((run_dir / "device.json").read_text())
    actors = {a["role"]: a for a in chosen["actors"]}
    assert sorted(actors) == ["engine", "trainer"] and len(chosen["actors"]) == 2
    assert actors["engine"]["node_id"] == actors["trainer"]["node_id"]
    log = (run_dir / "trinity.log").read_text(encoding="utf-8")
    assert "1 hf engine(s), 1 trainer rank(s), sync shared" in log
    assert "colocated, the weights are handed over through a shared-memory file the engine maps" in log
    assert (run_dir / "checkpoints" / "step-3" / "huggingface" / "model.safetensors").is_file()


def test_mode_colocate_by_name_and_its_refusals(tmp_path: Path, tiny_model: Path) -> None:
    config = job_config(tmp_path, tiny_model, **{"mode": "colocate", "cluster.gpu_per_node": 1,
                                                 "buffer.total_steps": 2})
    planned = trinity_run(config, tmp_path, "--dry-run")
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert "1 hf engine and 1 trainer rank sharing one CPU bundle (colocate)" in planned.stdout
    assert "nccl -> shared" in planned.stdout
    done = trinity_run(config, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "trinity: warning:" not in done.stderr  # asked for by name: nothing to announce
    train = [r for r in records(tmp_path / "ckpt" / "e2e" / "run") if r["phase"] == "train"]
    assert [r["step"] for r in train] == [1, 2]

    two_engines = job_config(tmp_path, tiny_model, **{"mode": "colocate", "cluster.gpu_per_node": 1,
                                                      "explorer.rollout_model.engine_num": 2})
    refused = trinity_run(two_engines, tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1].endswith(
        "mode: colocate runs one engine on one device: explorer.rollout_model.engine_num is 2; set 1")


def test_the_quickstart_learns_on_one_cpu_bundle(tmp_path: Path) -> None:
    """The README's quickstart, unchanged but for one device: it runs colocated and meets the quickstart's bar."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "TRINITY_CHECKPOINT_ROOT_DIR": str(tmp_path)}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "-m", "trinity.cli.main", "run", "--config", "examples/quickstart/cpu.yaml",
                           "--set", "cluster.gpu_per_node=1"], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "running as mode colocate" in done.stderr
    evals = [r["metrics"]["eval/reward/mean"] for r in records(tmp_path / "quickstart" / "toy-repeat-grpo")
             if r["phase"] == "eval"]
    first, final = evals[0], evals[-1]
    assert len(evals) == 9 and final >= max(2 * first, first + 0.2), evals
