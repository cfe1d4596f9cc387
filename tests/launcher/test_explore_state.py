"""Mode explore's saved state (its file and the storage mark) and the row of its last step."""

from __future__ import annotations

import json
from pathlib import Path

from trinity.buffer.storage.sqlite import SQLiteStorage
from trinity.launcher.explore import EXPLORER_STATE_MARK, saved_state
from trinity.launcher.restored_row import missing_explore_row


def write_rows(run_dir: Path, *rows: tuple[str, int]) -> None:
    lines = [json.dumps({"step": step, "phase": phase, "time": 0.0, "metrics": {"x": 1.0}}) for phase, step in rows]
    (run_dir / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))


def test_the_last_steps_row_is_returned_only_when_the_metrics_file_lacks_it(tmp_path: Path) -> None:
    assert missing_explore_row(tmp_path, None) is None  # no state: a first job
    state = {"tasks": {}, "model_version": 0, "row": {"step": 3, "metrics": {"explore/stored_experiences": 16}}}
    write_rows(tmp_path, ("explore", 1), ("explore", 2), ("train", 3))  # killed after storing step 3
    assert missing_explore_row(tmp_path, state) == (3, {"explore/stored_experiences": 16.0})
    write_rows(tmp_path, ("explore", 1), ("explore", 2), ("explore", 3))
    assert missing_explore_row(tmp_path, state) is None
    assert missing_explore_row(tmp_path, {"tasks": {}, "model_version": 0}) is None  # saved before rows were kept


def state_at(step: int) -> dict:
    return {"tasks": {"step": step}, "model_version": 0, "row": {"step": step, "metrics": {}}}


def test_the_newer_of_the_state_file_and_the_storage_mark_is_the_saved_state(tmp_path: Path) -> None:
    storage = SQLiteStorage(tmp_path / "buffer.sqlite")
    file = tmp_path / "explorer_state.json"
    try:
        assert saved_state(file, storage) is None  # a first job
        file.write_text(json.dumps(state_at(1)))
        assert saved_state(file, storage) == (state_at(1), str(file))
        storage.put_marked([], EXPLORER_STATE_MARK, json.dumps(state_at(2)))  # killed before the file's rename
        state, where = saved_state(file, storage)
        assert state == state_at(2) and "written with the batch" in where
        file.write_text(json.dumps(state_at(2)))
        assert saved_state(file, storage)[0] == state_at(2)
    finally:
        storage.release()
