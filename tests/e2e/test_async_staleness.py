"""End to end: mode both with the explorer up to two batches ahead (``sync_offset: 2``), ``staleness_control``
bounding what is trained to one version old, and PPO's decoupled objective: real Ray, the tiny model, FSDP2.

The model versions checked are those of the experiences handed to the trainer's steps, not a logged summary.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_run_both import job_config, records
from trinity.common.config import parse_config
from trinity.launcher import run_plan
from trinity.planner.run import resolve_run
from trinity.trainer.trainer import FSDPTrainer

MAX_STALENESS = 1


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trinity.common.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("model") / "tiny")


def test_async_run_never_trains_on_experiences_older_than_the_bound(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    trained: list[tuple[int, list[int]]] = []  # (trainer version before the step, model versions of its experiences)
    real_step = FSDPTrainer.train_step

    def recording_step(self: FSDPTrainer, experiences: Any, checkpoint_extra: Any = None) -> dict[str, float]:
        trained.append((self.step, [int(e.model_version) for e in experiences]))
        return real_step(self, experiences, checkpoint_extra)

    monkeypatch.setattr(FSDPTrainer, "train_step", recording_step)
    raw = job_config(tmp_path, tiny_model, **{
        "buffer.total_steps": 8, "synchronizer.sync_offset": 2, "synchronizer.verify_checksums": False,
        "buffer.explorer_input.eval_tasksets": [], "cluster.gpu_per_node": 2,
        "algorithm.sample_strategy": "staleness_control",
        "algorithm.sample_strategy_args": {"max_staleness": MAX_STALENESS},
        "algorithm.policy_loss_fn_args": {"decoupled": True},
    })
    assert run_plan(resolve_run(parse_config(raw))) == 0

    assert trained, "no training step ran"
    staleness = [version - model_version for version, versions in trained for model_version in versions]
    assert max(staleness) <= MAX_STALENESS, f"trained on experiences {max(staleness)} versions old"
    assert min(staleness) >= 0
    train = [r["metrics"] for r in records(tmp_path / "ckpt" / "e2e" / "run") if r["phase"] == "train"]
    assert len(train) == len(trained)
    for metrics in train:
        assert math.isfinite(metrics["loss"])
        assert math.isfinite(metrics["behav_imp_weight_mean"]) and math.isfinite(metrics["behav_approx_kl"])
        assert metrics["buffer/trained_staleness"] <= MAX_STALENESS
    # the explorer did run ahead: groups came out of policies older than the trainer's, and the stale ones were dropped
    assert max(m["buffer/max_seen_staleness"] for m in train) >= 1
