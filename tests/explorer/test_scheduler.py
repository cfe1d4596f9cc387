"""The scheduler with in-process engines: order, round-robin, retries, timeouts, reported failures."""

from __future__ import annotations

import dataclasses
import time

import pytest

from tests.explorer import flows
from tests.explorer.flows import probe_tasks
from tests.plans import make_plan
from trinity.common.models.engine import SamplingParams
from trinity.common.models.hf_engine import HFEngine
from trinity.common.workflows import Task, write_toy_tasks
from trinity.explorer import Scheduler


class VersionEngine:
    """The least an engine needs for the probe workflow."""

    def __init__(self, version: int) -> None:
        self.version = version

    def model_version(self) -> int:
        return self.version


def test_results_in_task_order_round_robin_and_concurrent() -> None:
    scheduler = Scheduler([VersionEngine(10), VersionEngine(20)], runners_per_engine=2, timeout=30)
    tasks = probe_tasks(8, "order", repeat_times=2, work_s=0.05)
    tasks.reverse()  # task order is the list's order, not the index
    result = scheduler.run(tasks)
    assert not result.failures
    assert [r[0].info["task_index"] for r in result.results] == [t.index for t in tasks]  # type: ignore[index]
    assert [e.run_id for e in result.experiences] == [0, 1] * 8
    engines = [r[0].info["engine"] for r in result.results]  # type: ignore[index]
    assert engines[:4] == [0, 1, 0, 1]
    assert engines.count(0) >= 2 and engines.count(1) >= 2
    assert all(r[0].model_version == (10, 20)[r[0].info["engine"]] for r in result.results)  # type: ignore[index]
    assert flows.max_concurrency() >= 2 and scheduler.num_runners == 4
    assert result.metrics["tasks"] == 8 and result.metrics["succeeded"] == 8 and result.metrics["attempts"] == 8
    assert result.metrics["experiences"] == 16 and result.metrics["retries"] == 0


def test_a_failed_attempt_is_retried_on_another_engine() -> None:
    scheduler = Scheduler([VersionEngine(0), VersionEngine(1)], runners_per_engine=1, max_retries=2)
    result = scheduler.run(probe_tasks(1, "flaky", fail_attempts=2))
    [[e]] = result.results  # type: ignore[misc]
    assert e.info["attempt"] == 3 and not result.failures
    assert result.metrics["retries"] == 2 and result.metrics["attempts"] == 3
    # attempts alternate engines: 0, 1, 0
    assert e.info["engine"] == 0


def test_a_task_failing_every_attempt_is_reported_not_dropped() -> None:
    scheduler = Scheduler([VersionEngine(0)], runners_per_engine=2, max_retries=1)
    tasks = probe_tasks(3, "fatal")
    tasks[1] = dataclasses.replace(tasks[1], workflow_args={"key": "fatal", "fail_attempts": -1})
    result = scheduler.run(tasks)
    assert result.results[0] is not None and result.results[2] is not None and result.results[1] is None
    [failure] = result.failures
    assert failure.position == 1 and failure.task is tasks[1] and failure.attempts == 2
    assert failure.error == "ValueError: boom on attempt 2" and not failure.timed_out
    assert result.metrics["failed"] == 1 and result.metrics["succeeded"] == 2
    assert len(result.experiences) == 2


def test_a_task_whose_workflow_cannot_be_built_is_not_retried() -> None:
    scheduler = Scheduler([VersionEngine(0)], max_retries=3)
    tasks = [Task(prompt="x", workflow="no_such_flow"), Task(prompt="y", workflow="math", workflow_args={"bad": 1})]
    result = scheduler.run(tasks)
    assert [f.attempts for f in result.failures] == [1, 1]
    assert "unknown workflow 'no_such_flow'" in result.failures[0].error
    assert "bad workflow_args" in result.failures[1].error
    assert result.metrics["retries"] == 0


def test_a_stalled_attempt_times_out_and_its_retry_succeeds() -> None:
    scheduler = Scheduler([VersionEngine(0)], runners_per_engine=1, timeout=0.4, max_retries=1)
    started = time.monotonic()
    result = scheduler.run(probe_tasks(2, "stall", stall_attempts=1, stall_s=1.5))
    elapsed = time.monotonic() - started
    assert not result.failures
    assert [r[0].info["attempt"] for r in result.results] == [2, 2]  # type: ignore[index]
    assert result.metrics["timeouts"] == 2 and result.metrics["retries"] == 2
    assert elapsed < 1.5, "the scheduler waited for an abandoned attempt"
    deadline = time.monotonic() + 5
    while len(flows.LATE_ERRORS) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert flows.LATE_ERRORS[-2:] == ["TaskCancelledError", "TaskCancelledError"]


def test_a_task_timing_out_every_attempt_is_reported() -> None:
    scheduler = Scheduler([VersionEngine(0)], runners_per_engine=2, timeout=0.2, max_retries=1)
    result = scheduler.run(probe_tasks(1, "stall-forever", stall_attempts=-1, stall_s=0.6))
    [failure] = result.failures
    assert failure.timed_out and failure.attempts == 2 and "TaskTimeoutError" in failure.error
    assert result.results == [None]


def test_construction_errors_and_config() -> None:
    with pytest.raises(ValueError, match="at least one engine"):
        Scheduler([])
    with pytest.raises(ValueError, match="timeout"):
        Scheduler([VersionEngine(0)], timeout=0)
    plan = make_plan({"explorer.runner_per_model": 3, "explorer.max_timeout": 9.0, "explorer.max_retry_times": 4,
                      "model.temperature": 0.5, "model.max_response_tokens": 7})
    scheduler = Scheduler.from_plan([VersionEngine(0), VersionEngine(1)], plan)
    assert (scheduler.num_runners, scheduler.timeout, scheduler.max_retries) == (6, 9.0, 4)
    # the model's length is the scheduler's default; its temperature reaches each task through its task set
    assert scheduler.sampling == SamplingParams(max_tokens=7)
    assert plan.buffer.train_taskset is not None
    assert plan.buffer.train_taskset.sampling["temperature"] == 0.5
    assert scheduler.run([]).results == []


def test_toy_tasks_on_an_in_process_engine(shared_engine: HFEngine, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    records = [json.loads(line) for line in write_toy_tasks(tmp_path / "t.jsonl", 6).read_text().splitlines()]
    tasks = [Task(prompt=r["question"], answer=r["answer"], index=i, repeat_times=4, workflow="toy_repeat",
                  step=3) for i, r in enumerate(records)]
    scheduler = Scheduler([shared_engine], runners_per_engine=3, sampling=SamplingParams(max_tokens=6))
    result = scheduler.run(tasks)
    assert not result.failures and len(result.experiences) == 24
    for task, experiences in zip(tasks, result.results, strict=True):
        assert experiences is not None and [e.run_id for e in experiences] == [0, 1, 2, 3]
        assert {e.group_id for e in experiences} == {f"train/e0/t{task.index}/s3"}
        assert all(1 <= e.response_length <= 6 for e in experiences)
    assert 0.0 <= result.metrics["reward_mean"] < 0.5
