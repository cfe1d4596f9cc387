"""End to end: `trinity run` in mode both on the CPU — real Ray, two FSDP2 trainer ranks over gloo,
an hf engine, online weight sync over gloo, metrics and checkpoints on disk."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.processes import kill_session
from trinity.common.config import parse_config
from trinity.launcher import run_plan
from trinity.monitor import load_records
from trinity.monitor.console_sink import HEADLINE_METRICS
from trinity.planner.run import resolve_run
from trinity.trainer.checkpoint import CheckpointDir

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "examples" / "quickstart" / "tasks"


def job_config(tmp: Path, model: Path, **overrides: object) -> dict:
    """A small toy_repeat GRPO job (upstream's schema): 2 trainer ranks, 1 engine, online sync, checksums."""
    raw: dict = {
        "mode": "both",
        "project": "e2e",
        "name": "run",
        "checkpoint_root_dir": str(tmp / "ckpt"),
        "model": {"model_path": str(model), "max_prompt_tokens": 32, "max_response_tokens": 6},
        "cluster": {"device": "auto", "cpus_per_bundle": 0.5, "node_num": 1, "gpu_per_node": 3},
        "buffer": {
            "batch_size": 2,
            "total_steps": 3,
            "explorer_input": {
                "taskset": {"path": str(TASKS / "train.jsonl"),
                            "format": {"prompt_key": "question", "response_key": "answer"}},
                "eval_tasksets": [{"name": "eval", "path": str(TASKS / "eval.jsonl"),
                                   "format": {"prompt_key": "question", "response_key": "answer"},
                                   "rollout_args": {"temperature": 0.0}}],
                "default_workflow_type": "toy_repeat",
            },
        },
        "explorer": {"runner_per_model": 2, "rollout_model": {"engine_num": 1, "dtype": "float32"}},
        "synchronizer": {"sync_method": "nccl", "verify_checksums": True},
        "trainer": {"use_torch_compile": False, "use_dynamic_bsz": False,
                    "trainer_config": {"actor_rollout_ref": {"model": {"enable_gradient_checkpointing": False},
                                                             "actor": {"ppo_micro_batch_size_per_gpu": 4}}}},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "optimizer": {"lr": 1e-3}},
        "monitor": {"progress": False},
        "data_processor": {"experience_pipeline": {"save_input": False}},
    }
    for dotted, value in overrides.items():
        node = raw
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return raw


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trinity.common.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("model") / "tiny")


def test_both_mode_trains_syncs_and_records(tmp_path: Path, tiny_model: Path) -> None:
    import ray

    assert not ray.is_initialized()
    config = parse_config(job_config(tmp_path, tiny_model))
    assert run_plan(resolve_run(config)) == 0
    assert not ray.is_initialized(), "the job must stop the local cluster it started"

    run_dir = tmp_path / "ckpt" / "e2e" / "run"
    logged = records(run_dir)
    train = [r for r in logged if r["phase"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3]
    for record in train:
        metrics = record["metrics"]
        assert metrics["sync/checksum_match"] == 1.0  # engine weights == trainer weights after each sync
        assert metrics["time/sync_s"] > 0
        assert metrics["loss"] == metrics["loss"]  # not NaN
    explore = [r for r in logged if r["phase"] == "explore"]
    assert [r["step"] for r in explore] == [1, 2, 3]
    evals = [r for r in logged if r["phase"] == "eval"]
    assert [r["step"] for r in evals] == [0, 3] and "eval/reward/mean" in evals[0]["metrics"]
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert (run_dir / "reward_curve.png").stat().st_size > 1000
    assert (run_dir / "checkpoints" / "step-3").is_dir()
    chosen = json.loads((run_dir / "device.json").read_text())
    assert (chosen["backend"], chosen["collective"], chosen["process_group_backend"]) == ("cpu", "gloo", "cpu:gloo")
    assert chosen["selection_reason"] and chosen["resource_key"] is None
    assert [(a["role"], a["name"]) for a in chosen["actors"]] == [
        ("trainer", "trainer-0"), ("trainer", "trainer-1"), ("engine", "rollout-0")]
    for actor in chosen["actors"]:
        assert actor["node_id"] and actor["devices"] == [] and actor["visible_devices"] is None
    log = (run_dir / "trinity.log").read_text(encoding="utf-8")  # INFO lines and every metric, console or not
    assert "INFO trinity.launcher: Ray:" in log and "run folder" in log
    for step in (1, 2, 3):
        line = next(x for x in log.splitlines() if f"trinity.metrics: [train] step {step}/3 |" in x)
        headline = {key for key, *_ in HEADLINE_METRICS}  # shown by their labels (reward, tokens/s, sync)
        assert all(f"{key} " in line for key in train[step - 1]["metrics"] if key not in headline), "every metric"
    assert "+" not in log.split("trinity.metrics: [train] step 3/3", 1)[1].splitlines()[0].split("|")[-1]


def run_cli(config_file: Path, log: Path, *, verbose: bool = False) -> subprocess.Popen[bytes]:
    """Start ``trinity [-v] run --config`` in its own session (its Ray cluster too), output appended to ``log``."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "trinity.cli.main", *(["-v"] if verbose else []), "run", "--config",
             str(config_file)],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=REPO,
        )


def kill_when(process: subprocess.Popen[bytes], log: Path, ready: Callable[[], bool], limit: float = 300) -> None:
    """SIGKILL ``process`` and everything it started once ``ready()``, and wait for all of it to be gone.

    Fail if it ended before ``ready()``. Its Ray workers lead process groups
    of their own, so the whole session is killed: a worker left running could
    save a checkpoint after the caller has looked at the run folder.
    """
    deadline = time.monotonic() + limit
    try:
        while time.monotonic() < deadline:
            if ready() or process.poll() is not None:
                break
            time.sleep(0.05)
        assert process.poll() is None, f"the first run ended early:\n{log.read_text()[-3000:]}"
    finally:
        kill_session(process.pid)  # the driver, the local Ray cluster it started and its workers
        process.wait(30)


@pytest.mark.parametrize("devices", [2, 1], ids=["both", "colocate"])
def test_killed_run_resumes_without_losing_or_repeating_a_step(tmp_path: Path, tiny_model: Path, devices: int) -> None:
    """Also in mode colocate (one bundle): there the resumed trainer's weights must reach the engine's mapping."""
    colocated = devices == 1
    raw = job_config(tmp_path, tiny_model, **{
        "buffer.total_steps": 5, "trainer.save_interval": 2, "cluster.gpu_per_node": devices,
        "synchronizer.verify_checksums": colocated, "buffer.explorer_input.eval_tasksets": [],
    })
    config_file = tmp_path / "job.yaml"
    config_file.write_text(yaml.safe_dump(raw))
    run_dir = tmp_path / "ckpt" / "e2e" / "run"
    log = tmp_path / "run.log"

    kill_when(run_cli(config_file, log), log, lambda: (run_dir / "checkpoints" / "step-2").is_dir() and (
        run_dir / "metrics.jsonl").exists() and any(r["phase"] == "train" and r["step"] == 3 for r in records(run_dir)))
    killed_at = max(r["step"] for r in records(run_dir) if r["phase"] == "train")
    assert killed_at >= 3
    # On a loaded machine the first run may reach the step-4 checkpoint before the kill lands.
    latest = CheckpointDir(run_dir / "checkpoints").latest()
    assert latest is not None
    saved = int(latest.name.removeprefix("step-"))
    assert 2 <= saved <= killed_at and saved < 5
    expected = list(range(saved + 1, 6))

    before = len(records(run_dir))
    second = run_cli(config_file, log)
    assert second.wait(300) == 0, log.read_text()[-3000:]
    resumed = records(run_dir)[before:]
    train_steps = [r["step"] for r in resumed if r["phase"] == "train"]
    explore_steps = [r["step"] for r in resumed if r["phase"] == "explore"]
    assert train_steps == expected, "the resumed run restarts after its last checkpoint and runs to the end"
    if colocated:  # each step's weights reached the engine through the shared file, the resumed ones too
        assert all(r["metrics"]["sync/checksum_match"] == 1.0 for r in resumed if r["phase"] == "train")
        from trinity.synchronizer.synchronizer import default_shared_path

        shared = default_shared_path(resolve_run(parse_config(raw)))
        assert shared.parent == Path("/dev/shm") and not shared.exists(), "the finished run removed its file"
    assert explore_steps == expected, "it explores exactly the batches after the checkpoint: none lost, none redone"
    state = json.loads((run_dir / "checkpoints" / "step-5" / "trainer_state.json").read_text())
    assert state["step"] == 5 and state["extra"]["tasks"]["step"] == 5
    marker = resumed[0]  # the resumed run's first line marks the resume
    assert (marker["phase"], marker["resumed_from_step"], marker["resumed_from"]) == ("resume", saved,
                                                                                      {"explore": saved})
    assert marker["run_id"]
    if killed_at > saved:  # the killed run's rows of the steps after its checkpoint stay in the file...
        assert [r["step"] for r in records(run_dir) if r["phase"] == "train"].count(saved + 1) == 2
    current = load_records(run_dir / "metrics.jsonl")  # ...and the reader shows each step once, the resumed run's
    assert [r.step for r in current if r.phase == "train"] == [1, 2, 3, 4, 5]
    assert [r.step for r in current if r.phase == "explore"] == [1, 2, 3, 4, 5]
    assert [r.time for r in current if r.phase == "train"][saved:] == [r["time"] for r in resumed
                                                                       if r["phase"] == "train"]
    shutil.rmtree(tmp_path / "ckpt", ignore_errors=True)
