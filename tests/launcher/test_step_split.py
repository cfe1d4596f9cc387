"""Every train record of mode both splits the step's wall time: real Ray, the tiny model, FSDP2 over gloo.

With ``sync_offset: 0`` the loop is serial (explore, train, sync in turn):
explore + train + save + sync + eval + driver add up to the step and the
rollout is never hidden. With ``sync_offset: 1`` rollouts overlap training:
the parts still add up, and only the rollout time the trainer did not hide
counts as exploring.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_run_both import job_config, records
from trinity.common.config import parse_config
from trinity.launcher import run_plan
from trinity.planner.run import resolve_run

PARTS = ("time/explore_s", "time/train_s", "time/save_s", "time/sync_s", "time/eval_s", "time/driver_s")
ALWAYS = (
    "time/step_s",
    "time/explore_s",
    "time/train_s",
    "time/sync_s",
    "time/driver_s",
    "time/rollout_s",
    "time/explore_wait_s",
)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trinity.common.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("model") / "tiny")


def _train_records(tmp: Path, model: Path, name: str, **overrides: Any) -> list[dict[str, Any]]:
    raw = job_config(tmp, model, name=name, **{"synchronizer.verify_checksums": False, **overrides})
    assert run_plan(resolve_run(parse_config(raw))) == 0
    return [r for r in records(tmp / "ckpt" / "e2e" / name) if r["phase"] == "train"]


def _check_adds_up(train: list[dict[str, Any]]) -> None:
    for record in train:
        metrics = record["metrics"]
        assert all(key in metrics for key in ALWAYS), sorted(metrics)
        assert all(metrics.get(key, 0.0) >= 0 for key in (*PARTS, *ALWAYS)), metrics
        total = sum(metrics.get(key, 0.0) for key in PARTS)
        assert total == pytest.approx(metrics["time/step_s"], abs=1e-6), (record["step"], metrics)
        assert metrics["time/train_s"] > 0 and metrics["time/sync_s"] > 0
    # the step is wall time: consecutive records are logged one step apart
    for before, after in itertools.pairwise(train):
        assert after["metrics"]["time/step_s"] == pytest.approx(after["time"] - before["time"], abs=0.5)


def test_serial_loop_steps_split_into_parts_that_add_up(tmp_path: Path, tiny_model: Path) -> None:
    train = _train_records(tmp_path, tiny_model, "serial", **{"trainer.save_interval": 2, "explorer.eval_interval": 2})
    assert [r["step"] for r in train] == [1, 2, 3]
    _check_adds_up(train)
    metrics = {r["step"]: r["metrics"] for r in train}
    # a checkpoint is saved in step 2 only; the evaluation after step 2 runs in step 3's window
    assert [("time/save_s" in metrics[k], "time/eval_s" in metrics[k]) for k in (1, 2, 3)] == [
        (False, False),
        (True, False),
        (False, True),
    ]
    assert metrics[2]["time/save_s"] > 0 and metrics[3]["time/eval_s"] > 0
    for step, values in metrics.items():
        # nothing overlaps a rollout: all of it is counted as exploring, and the trainer waited at least that long
        assert values["time/explore_s"] > 0, step
        assert values["time/explore_s"] == pytest.approx(values["time/rollout_s"], abs=0.05), step
        assert values["time/explore_wait_s"] >= values["time/explore_s"] - 0.25, step


def test_concurrent_loop_counts_only_the_rollout_time_not_hidden(tmp_path: Path, tiny_model: Path) -> None:
    train = _train_records(
        tmp_path,
        tiny_model,
        "ahead",
        **{"synchronizer.sync_offset": 1, "trainer.save_interval": 0, "buffer.total_steps": 4},
    )
    assert [r["step"] for r in train] == [1, 2, 3, 4]
    _check_adds_up(train)
    hidden = [r["metrics"]["time/rollout_s"] - r["metrics"]["time/explore_s"] for r in train]
    # a rollout batch running behind a training step leaves part of it hidden; how much depends on the machine's
    # load (tens of ms per step on two busy cores), so the steps' total is checked against a small floor
    assert sum(hidden) > 0.02, f"no rollout ran behind a training step: {hidden}"
