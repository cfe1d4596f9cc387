"""Parameter and optimizer offload on the device: peak device memory of two GRPO steps with and without it.

The FSDP2 trainer (in-process, one rank) runs the same two steps three times:
no offload, ``optimizer_offload`` (state on the host between steps) and
``param_offload`` (FSDP2's ``CPUOffloadPolicy``). Reported: each setting's
peak device memory and step time, and the largest loss difference from the
run without offload.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gpu_support import EXPECTED_DEVICE
from test_fsdp_trainer import _experiences

SETTINGS = {"none": {}, "optimizer": {"optimizer_offload": True}, "params": {"param_offload": True}}


def _steps(tiny_model: Path, workdir: Path, name: str, fsdp: dict[str, Any]) -> tuple[list[dict[str, float]], float]:
    import torch

    from trinity.buffer import pipeline_for_plan
    from trinity.common.config import parse_config
    from trinity.planner.run import resolve_run
    from trinity.trainer.trainer import FSDPTrainer

    plan = resolve_run(parse_config({
        "mode": "train", "project": "gpu-check", "name": f"offload-{name}",
        "checkpoint_root_dir": str(workdir / "checkpoints"),
        "model": {"model_path": str(tiny_model), "max_prompt_tokens": 256, "max_response_tokens": 64},
        "cluster": {"node_num": 1, "gpu_per_node": 1},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "optimizer": {"lr": 1e-3}},
        "explorer": {"rollout_model": {"dtype": "float32"}},
        "trainer": {"save_interval": 0, "use_dynamic_bsz": False, "use_torch_compile": False,
                    "trainer_config": {"actor_rollout_ref": {"actor": {"ppo_micro_batch_size_per_gpu": 8,
                                                                       "fsdp_config": fsdp}}}},
        "monitor": {"monitor_type": "none"},
    }))
    on_gpu = EXPECTED_DEVICE != "cpu"
    if on_gpu:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    trainer = FSDPTrainer(plan, in_process=True, use_torch_compile=False)
    try:
        pipeline = pipeline_for_plan(plan, pad_token_id=trainer.pad_token_id)
        metrics = [trainer.train_step(pipeline.process(_experiences(groups=4, group_size=4, vocab=300, seed=s)))
                   for s in (0, 1)]
        peak = torch.cuda.max_memory_allocated() / 2**20 if on_gpu else 0.0
    finally:
        trainer.shutdown()
    return metrics, peak


def test_offload(selected_backend: str, tiny_model: Path, workdir: Path, detail: Callable[[str], None]) -> None:
    """Offload keeps the losses and lowers the peak device memory (parameters most)."""
    results = {name: _steps(tiny_model, workdir, name, fsdp) for name, fsdp in SETTINGS.items()}
    base = results["none"][0]
    for name, (metrics, _) in results.items():
        for before, after in zip(base, metrics, strict=True):
            assert after["loss"] == pytest.approx(before["loss"], rel=1e-4, abs=1e-6), name
    text = ", ".join(f"{name}: peak {peak:.0f} MiB, step {metrics[1]['step_time_s']:.2f} s"
                     for name, (metrics, peak) in results.items())
    detail(text)
    if EXPECTED_DEVICE != "cpu":
        assert results["params"][1] < results["none"][1], text
