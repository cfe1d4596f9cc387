"""Mode explore's state file carries its last step's metrics row, for a job killed before it logged the row."""

from __future__ import annotations

import json
from pathlib import Path

from trinity.launcher.restored_row import missing_explore_row


def write_rows(run_dir: Path, *rows: tuple[str, int]) -> None:
    lines = [json.dumps({"step": step, "phase": phase, "time": 0.0, "metrics": {"x": 1.0}}) for phase, step in rows]
    (run_dir / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))


def test_the_last_steps_row_is_returned_only_when_the_metrics_file_lacks_it(tmp_path: Path) -> None:
    state = tmp_path / "explorer_state.json"
    assert missing_explore_row(tmp_path, state) is None  # no state: a first job
    state.write_text(json.dumps({"tasks": {}, "model_version": 0,
                                 "row": {"step": 3, "metrics": {"explore/stored_experiences": 16}}}))
    write_rows(tmp_path, ("explore", 1), ("explore", 2), ("train", 3))  # killed after storing step 3
    assert missing_explore_row(tmp_path, state) == (3, {"explore/stored_experiences": 16.0})
    write_rows(tmp_path, ("explore", 1), ("explore", 2), ("explore", 3))
    assert missing_explore_row(tmp_path, state) is None
    state.write_text(json.dumps({"tasks": {}, "model_version": 0}))  # a state written before rows were kept
    assert missing_explore_row(tmp_path, state) is None
