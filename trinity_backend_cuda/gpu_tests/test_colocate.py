"""Mode colocate on one GPU: ``trinity run`` with the engine and the trainer rank on it (hf; vLLM with sleep mode).

Each case is a whole ``trinity run`` (a subprocess: its own local Ray
cluster) of 4 GRPO steps on the tiny model, ``cluster.gpu_per_node: 1``,
checksums verified after every sync. Reported: the sync method, median sync
milliseconds, checksum matches, steps/s and wall time.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "examples" / "quickstart" / "tasks" / "train.jsonl"


def _run(workdir: Path, model: Path, name: str, engine_type: str) -> tuple[list[dict[str, float]], str, float]:
    """Run 4 colocated steps; return the train records' metrics, the run's log, and its wall seconds."""
    import time

    config = {
        "mode": "colocate", "project": "gpu-check", "name": name,
        "checkpoint_root_dir": str(workdir / "checkpoints"),
        "model": {"model_path": str(model), "max_prompt_tokens": 64, "max_response_tokens": 16},
        "cluster": {"node_num": 1, "gpu_per_node": 1},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 8, "optimizer": {"lr": 1e-4}},
        "buffer": {"batch_size": 4, "total_steps": 4, "explorer_input": {
            "taskset": {"path": str(TASKS), "format": {"prompt_key": "question", "response_key": "answer"}},
            "default_workflow_type": "toy_repeat"}},
        "explorer": {"rollout_model": {"engine_type": engine_type, "engine_num": 1, "gpu_memory_utilization": 0.9}},
        "synchronizer": {"sync_method": "nccl", "verify_checksums": True},
        "trainer": {"save_interval": 0, "use_torch_compile": False},
        "monitor": {"monitor_type": "none", "progress": False, "plot": False},
    }
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "trinity.cli.main", "-v", "run", "--config", str(path)],
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    wall = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = workdir / "checkpoints" / "gpu-check" / name / "metrics.jsonl"
    train = [r["metrics"] for r in map(json.loads, metrics.read_text().splitlines()) if r.get("phase") == "train"]
    return train, done.stderr, wall


@pytest.mark.parametrize("engine_type", ["hf", "vllm"])
def test_colocate(selected_backend: str, tiny_model: Path, workdir: Path, engine_type: str,
                  detail: Callable[[str], None]) -> None:
    """4 colocated steps: every sync's checksum matches; sync method and time, steps/s."""
    if engine_type == "vllm":
        pytest.importorskip("vllm", reason="vllm not installed")
    train, log, wall = _run(workdir, tiny_model, f"colocate-{engine_type}", engine_type)
    assert [int(m["step"]) for m in train] == [1, 2, 3, 4]
    matches = sum(1 for m in train if m.get("sync/checksum_match") == 1.0)
    sync_ms = 1e3 * statistics.median(float(m["sync/seconds"]) for m in train)
    steps_per_s = len(train) / sum(float(m["time/step_s"]) for m in train)
    method = next((line.split("sync ", 1)[1].split(";", 1)[0] for line in log.splitlines() if "trainer rank(s), sync"
                   in line), "?")
    sleeps = "sleeps while training" if "the vLLM engine sleeps" in log else "stays awake"
    text = (f"{engine_type} engine: 4 steps, sync {method} {sync_ms:.2f} ms (median), checksum matches "
            f"{matches}/4, {steps_per_s:.2f} steps/s, wall {wall:.0f} s"
            + (f", engine {sleeps}" if engine_type == "vllm" else ""))
    detail(text)
    assert matches == 4, text
