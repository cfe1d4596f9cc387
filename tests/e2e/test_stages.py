"""A multi-stage run (``stages:``): SFT warm-up, then GRPO from the SFT model; a rerun skips finished stages."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from trinity.common.config import load_config
from trinity.launcher import run_job
from trinity.launcher.stages import STAGES_FILE

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    import ray

    from tests.trainer.support import start_ray

    started = start_ray()
    yield
    if started:
        ray.shutdown()


def stage_config(root: Path, model: Path) -> dict[str, Any]:
    """The grpo_gsm8k example's settings as the RFT stage, after a two-step SFT stage (as upstream's comment shows)."""
    return {
        "project": "stages", "name": "warmup-then-rft", "checkpoint_root_dir": str(root),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, "optimizer": {"lr": 1e-4}},
        "model": {"model_path": str(model), "max_prompt_tokens": 96, "max_response_tokens": 8},
        "cluster": {"node_num": 1, "gpu_per_node": 2, "cpus_per_bundle": 0.5},
        "buffer": {"batch_size": 2, "total_steps": 1, "explorer_input": {
            "taskset": {"path": str(REPO / "examples" / "data" / "math"),
                        "format": {"prompt_key": "question", "response_key": "answer"}},
            "default_workflow_type": "math_workflow"}},
        "explorer": {"runner_per_model": 2, "rollout_model": {"dtype": "float32"}},
        "trainer": {"use_torch_compile": False, "use_dynamic_bsz": False},
        "monitor": {"progress": False, "plot": False, "monitor_type": "none"},
        "data_processor": {"experience_pipeline": {"save_input": False}},
        "stages": [
            {"stage_name": "sft_warmup", "mode": "train", "algorithm": {"algorithm_type": "sft",
                                                                       "optimizer": {"lr": 1e-3}},
             "buffer": {"train_batch_size": 4, "total_steps": 2, "trainer_input": {"experience_buffer": {
                 "storage_type": "file", "path": str(REPO / "examples" / "data" / "sft" / "messages"),
                 "format": {"prompt_type": "messages", "messages_key": "messages"}}}}},
            {"stage_name": "rft"},
        ],
    }


def records(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_stages_run_in_order_and_hand_over_the_model(ray_cluster: None, tmp_path: Path) -> None:
    from trinity.common.models.tiny import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny")
    config_file = tmp_path / "stages.yaml"
    config_file.write_text(yaml.safe_dump(stage_config(tmp_path / "runs", model)), encoding="utf-8")
    assert run_job(config_file) == 0

    top = tmp_path / "runs" / "stages" / "warmup-then-rft"
    sft_dir, rft_dir = top / "sft_warmup", top / "rft"
    assert json.loads((top / STAGES_FILE).read_text())["completed"] == ["sft_warmup", "rft"]
    assert [r["step"] for r in records(sft_dir) if r["phase"] == "train"] == [1, 2]
    assert "sft_loss" in records(sft_dir)[0]["metrics"]
    export = sft_dir / "checkpoints" / "step-2" / "huggingface"
    assert (export / "config.json").is_file() and (export / "model.safetensors").is_file()
    rft_state = json.loads((rft_dir / "checkpoints" / "step-1" / "trainer_state.json").read_text())
    assert rft_state["model_path"] == str(export), "the RFT stage starts from the SFT stage's final model"
    assert rft_state["algorithm"] == "grpo"

    # the same command again: both stages are done, nothing runs
    before = (len(records(sft_dir)), len(records(rft_dir)))
    assert run_job(config_file) == 0
    assert (len(records(sft_dir)), len(records(rft_dir))) == before
    assert load_config(config_file).name == "warmup-then-rft"  # the file itself is not rewritten
