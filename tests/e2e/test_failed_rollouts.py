"""End to end: a run in mode both where half of every step's tasks time out trains on the rest, quickly."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.test_run_both import job_config, records
from trinity.common.config import parse_config
from trinity.common.experience import Experience
from trinity.common.models.client import RolloutModel
from trinity.common.workflows import WORKFLOWS, Task
from trinity.common.workflows.toy import ToyRepeatWorkflow
from trinity.launcher import run_plan
from trinity.planner.run import resolve_run

READ_TIMEOUT = 600.0


class HalfStalls(ToyRepeatWorkflow):
    """``toy_repeat``, except that tasks with an odd index sleep past any deadline first (a hung rollout)."""

    def run(self, engine: RolloutModel, task: Task) -> list[Experience]:
        if task.index % 2:
            time.sleep(60.0)  # abandoned by the scheduler at explorer.max_timeout
        return super().run(engine, task)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trinity.common.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("model") / "tiny")


def test_a_step_with_half_its_tasks_timing_out_trains_on_the_rest(tmp_path: Path, tiny_model: Path) -> None:
    WORKFLOWS.add("test_half_stalls", HalfStalls)
    raw = job_config(tmp_path, tiny_model, **{
        "buffer.batch_size": 4, "buffer.total_steps": 2, "buffer.explorer_input.eval_tasksets": [],
        "buffer.explorer_input.default_workflow_type": "test_half_stalls",
        "buffer.trainer_input.experience_buffer.max_read_timeout": READ_TIMEOUT,
        "explorer.max_timeout": 2.0, "explorer.max_retry_times": 1, "explorer.runner_per_model": 4,
        "explorer.eval_on_startup": False, "synchronizer.verify_checksums": False,
    })
    started = time.monotonic()
    assert run_plan(resolve_run(parse_config(raw))) == 0
    elapsed = time.monotonic() - started
    assert elapsed < READ_TIMEOUT / 5, f"the run took {elapsed:.0f} s"

    logged = records(tmp_path / "ckpt" / "e2e" / "run")
    explore = [r["metrics"] for r in logged if r["phase"] == "explore"]
    assert len(explore) == 2
    for metrics in explore:
        # two of the four groups timed out on both attempts and were dropped whole
        assert metrics["explore/dropped_groups"] == 2 and metrics["explore/dropped_rollouts"] == 8
        assert metrics["explore/complete_groups"] == 2 and metrics["explore/timeouts"] == 4
        assert metrics["explore/stored_experiences"] == 8
    train = [r["metrics"] for r in logged if r["phase"] == "train"]
    # each training step takes its explorer step's places: the two complete groups, never waiting for the rest
    assert [m["rows"] for m in train] == [8.0, 8.0]
    assert all(m["loss"] == m["loss"] for m in train)  # not NaN


def test_train_on_an_open_buffer_ends_each_batch_with_the_explorer_steps_complete_groups(
    tmp_path: Path, tiny_model: Path
) -> None:
    import sqlite3
    from contextlib import closing

    from tests.e2e.test_run_modes import mode_config

    WORKFLOWS.add("test_half_stalls", HalfStalls)
    common = {"buffer.explorer_input.default_workflow_type": "test_half_stalls", "buffer.batch_size": 4,
              "explorer.max_timeout": 2.0, "explorer.max_retry_times": 0, "explorer.runner_per_model": 4}
    assert run_plan(mode_config(tmp_path, tiny_model, "explore", **common)) == 0
    run_dir = tmp_path / "ckpt" / "e2e" / "run"
    # as if the explore job were still running: the buffer stays open, so a reader would wait for more groups
    with closing(sqlite3.connect(run_dir / "buffer" / "experience.sqlite")) as db:
        db.execute("DELETE FROM buffer_state WHERE key = 'closed'")
        db.commit()
    train = mode_config(tmp_path, tiny_model, "train", **common, **{
        "buffer.trainer_input.experience_buffer": {"name": "experience", "storage_type": "sql",
                                                   "max_read_timeout": READ_TIMEOUT}})
    started = time.monotonic()
    assert run_plan(train) == 0
    elapsed = time.monotonic() - started
    assert elapsed < READ_TIMEOUT / 5, f"the train job took {elapsed:.0f} s"
    # each explorer step stored 2 of its 4 groups: each training step is those 2 groups, not 4 from two steps
    steps = [r["metrics"] for r in records(run_dir) if r["phase"] == "train"]
    assert [m["rows"] for m in steps] == [8.0, 8.0]
