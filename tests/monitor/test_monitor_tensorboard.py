"""The tensorboard sink: event files under <run>/tensorboard that TensorBoard reads back."""

from __future__ import annotations

from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.monitor._helpers import only
from trinity.monitor import TENSORBOARD_DIR, Monitor


def test_scalars_read_back_with_event_accumulator(tmp_path: Path) -> None:
    monitor = Monitor(only(tensorboard=True), tmp_path)
    monitor.log({"reward/mean": 0.25, "loss": 2.0}, step=1, phase="train")
    monitor.log({"reward/mean": 0.5, "loss": 1.0}, step=2, phase="train")
    monitor.log({"reward/mean": 0.75}, step=2, phase="eval")
    monitor.close()

    log_dir = tmp_path / TENSORBOARD_DIR
    assert any(p.name.startswith("events.out.tfevents") for p in log_dir.iterdir())
    events = EventAccumulator(str(log_dir))
    events.Reload()
    assert {"train/reward/mean", "train/loss", "eval/reward/mean"} <= set(events.Tags()["scalars"])
    train = [(e.step, e.value) for e in events.Scalars("train/reward/mean")]
    assert train == [(1, 0.25), (2, 0.5)]
    assert [(e.step, e.value) for e in events.Scalars("eval/reward/mean")] == [(2, 0.75)]
    assert [e.value for e in events.Scalars("train/loss")] == pytest.approx([2.0, 1.0])


def test_flush_makes_scalars_visible_before_close(tmp_path: Path) -> None:
    monitor = Monitor(only(tensorboard=True), tmp_path)
    try:
        monitor.log({"reward/mean": 0.125}, step=7, phase="explore")
        monitor.flush()
        events = EventAccumulator(str(tmp_path / TENSORBOARD_DIR))
        events.Reload()
        assert [(e.step, e.value) for e in events.Scalars("explore/reward/mean")] == [(7, 0.125)]
    finally:
        monitor.close()
