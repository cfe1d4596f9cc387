"""After a resume, each step shows once: the resume marker supersedes the crashed run's rows of the steps after
its checkpoint, in the metrics file's readers (records, reward plot) and in TensorBoard (``purge_step``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.monitor._helpers import only
from trinity.monitor import METRICS_FILE, Monitor, load_records, plot
from trinity.monitor.plot import RewardSeries
from trinity.monitor.records import MetricRecord, current_records, resume_marker


def _row(step: int, phase: str = "train", value: float = 0.0) -> MetricRecord:
    return MetricRecord(step=step, phase=phase, time=float(step), metrics={"reward/mean": value})


def test_a_resume_marker_supersedes_the_rows_after_its_step_written_before_it() -> None:
    crashed = [_row(1), _row(1, "explore"), _row(2), _row(2, "explore"), _row(3), _row(3, "explore"), _row(4)]
    resumed = [_row(3, value=9.0), _row(3, "explore", 9.0), _row(4, value=9.0)]
    shown = current_records([*crashed, resume_marker(2, "r2"), *resumed])
    assert [(r.phase, r.step, r.metrics["reward/mean"]) for r in shown] == [
        ("train", 1, 0.0), ("explore", 1, 0.0), ("train", 2, 0.0), ("explore", 2, 0.0),
        ("train", 3, 9.0), ("explore", 3, 9.0), ("train", 4, 9.0)]


def test_a_phase_may_resume_from_its_own_step() -> None:
    """Mode both with a persistent buffer: batches explored ahead of the checkpoint are kept, not explored again."""
    crashed = [_row(1), _row(1, "explore"), _row(2, "explore"), _row(3, "explore"), _row(2)]
    shown = current_records([*crashed, resume_marker(1, "r2", {"explore": 2}), _row(2, value=9.0)])
    assert [(r.phase, r.step, r.metrics["reward/mean"]) for r in shown] == [
        ("train", 1, 0.0), ("explore", 1, 0.0), ("explore", 2, 0.0), ("train", 2, 9.0)]


def _monitor(tmp_path: Path, tensorboard: bool = False) -> Monitor:
    return Monitor(only(jsonl=True, tensorboard=tensorboard), tmp_path)


def test_monitor_writes_the_marker_and_readers_show_each_step_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _monitor(tmp_path) as crashed:
        for step in (1, 2, 3, 4):
            crashed.log({"reward/mean": 0.1 * step}, step=step, phase="train")
    with _monitor(tmp_path) as resumed:
        marker = resumed.mark_resume(2)
        resumed.log({"reward/mean": 0.9}, step=3, phase="train")
    lines = [json.loads(line) for line in (tmp_path / METRICS_FILE).read_text().splitlines()]
    assert lines[4] == {"step": 2, "phase": "resume", "time": pytest.approx(marker.time), "metrics": {},
                        "run_id": resumed.run_id, "resumed_from_step": 2}
    assert resumed.run_id != crashed.run_id
    assert [(r.phase, r.step) for r in load_records(tmp_path / METRICS_FILE, raw=True)] == [
        ("train", 1), ("train", 2), ("train", 3), ("train", 4), ("resume", 2), ("train", 3)]
    assert [(r.step, r.metrics["reward/mean"]) for r in load_records(tmp_path / METRICS_FILE)] == [
        (1, 0.1), (2, 0.2), (3, 0.9)]
    drawn: list[RewardSeries] = []
    monkeypatch.setattr(plot, "_draw", lambda series, title, path: drawn.append(series) or path.write_bytes(b""))
    plot.plot_reward_curve(tmp_path / METRICS_FILE)  # the resumed run is still at step 3
    assert drawn[0].train == {1: 0.1, 2: 0.2, 3: 0.9}


def test_tensorboard_purges_the_steps_logged_again(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with _monitor(tmp_path, tensorboard=True) as crashed:
        for step in (1, 2, 3, 4):
            crashed.log({"loss": float(step)}, step=step, phase="train")
    with _monitor(tmp_path, tensorboard=True) as resumed:
        resumed.mark_resume(2)
        for step in (3, 4, 5):
            resumed.log({"loss": 10.0 * step}, step=step, phase="train")
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [
        (1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0), (5, 50.0)]
