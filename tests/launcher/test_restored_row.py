"""A checkpoint's step whose train row its run did not live to log gets the row from the checkpoint on resume."""

from __future__ import annotations

from pathlib import Path

from tests.monitor._helpers import only
from trinity.launcher.restored_row import logged_before, missing_train_row
from trinity.monitor import Monitor


def _killed_run(run_dir: Path, logged: int) -> None:
    with Monitor(only(jsonl=True), run_dir) as monitor:
        for step in range(1, logged + 1):
            monitor.log({"loss": float(step)}, step=step, phase="train")


def test_the_row_is_restored_when_the_step_was_saved_but_not_logged(tmp_path: Path) -> None:
    _killed_run(tmp_path, logged=3)  # killed after saving step 4, before logging it
    resumed = {"step": 4, "extra": {"step_metrics": {"loss": 4.0, "rows": 8}}, "path": "step-4"}
    assert missing_train_row(tmp_path, resumed) == {"loss": 4.0, "rows": 8.0}


def test_nothing_is_restored_when_the_row_is_there_or_unknown(tmp_path: Path) -> None:
    _killed_run(tmp_path, logged=4)
    assert missing_train_row(tmp_path, {"step": 4, "extra": {"step_metrics": {"loss": 4.0}}}) is None
    assert missing_train_row(tmp_path, {"step": 6, "extra": {"sampler": {}}}) is None  # an older checkpoint
    assert missing_train_row(tmp_path / "elsewhere", {"step": 4, "extra": {"step_metrics": {"loss": 4.0}}}) is None


def test_a_rerun_from_scratch_sees_the_killed_runs_rows_of_its_phases(tmp_path: Path) -> None:
    assert not logged_before(tmp_path)
    _killed_run(tmp_path, logged=1)  # killed after step 1, before any checkpoint
    assert logged_before(tmp_path) and logged_before(tmp_path, ("train",))
    assert not logged_before(tmp_path, ("explore", "eval")), "an explore job beside it has nothing to supersede"
