"""A resume marker of a job that shares the metrics file (a train job beside an explore job) supersedes only
the rows of the phases that job writes."""

from __future__ import annotations

from pathlib import Path

from tests.monitor._helpers import only
from trinity.monitor import Monitor, load_records
from trinity.monitor.records import MetricRecord, current_records, resume_marker, resumed_from


def _row(step: int, phase: str) -> MetricRecord:
    return MetricRecord(step=step, phase=phase, time=float(step), metrics={"reward/mean": float(step)})


def test_a_scoped_marker_leaves_the_other_jobs_rows_alone() -> None:
    explored = [_row(step, "explore") for step in range(1, 6)]  # an explore job ran ahead to step 5
    trained = [_row(1, "train"), _row(2, "train"), _row(3, "train")]  # a train job, killed after its step-2 save
    marker = resume_marker(2, "train-2", scope=("train",))
    shown = current_records([*explored, *trained, marker, _row(3, "train")])
    assert [(r.phase, r.step) for r in shown] == [
        ("explore", 1),
        ("explore", 2),
        ("explore", 3),
        ("explore", 4),
        ("explore", 5),
        ("train", 1),
        ("train", 2),
        ("train", 3),
    ]
    assert resumed_from(marker, "explore") is None and resumed_from(marker, "train") == 2


def test_an_unscoped_marker_still_covers_every_phase() -> None:
    marker = resume_marker(2, "both-2")
    assert resumed_from(marker, "explore") == 2 and resumed_from(marker, "train") == 2
    assert "phases" not in marker.extra


def test_the_monitor_writes_the_scope_into_the_marker(tmp_path: Path) -> None:
    with Monitor(only(jsonl=True), tmp_path) as monitor:
        for step in (1, 2, 3):
            monitor.log({"reward/mean": 0.5}, step=step, phase="explore")
    with Monitor(only(jsonl=True), tmp_path) as resumed:
        marker = resumed.mark_resume(1, scope=("train",))
        resumed.log({"loss": 1.0}, step=2, phase="train")
    assert marker.extra["phases"] == ["train"]
    metrics = tmp_path / "metrics.jsonl"
    assert [(r.phase, r.step) for r in load_records(metrics)] == [
        ("explore", 1),
        ("explore", 2),
        ("explore", 3),
        ("train", 2),
    ]
