"""The scheduler with in-process engines: order, round-robin, retries, timeouts, reported failures."""

from __future__ import annotations

import dataclasses
import time

import pytest

from tests.explorer import flows
from tests.explorer.flows import probe_tasks
from tests.plans import make_plan
from trinity.common.config import ConfigError
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
    tasks = [Task(prompt="x", workflow="no_such_flow"),  # two groups: a failed group cancels only its own tasks
             Task(prompt="y", index=1, workflow="math", workflow_args={"bad": 1})]
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


def test_attempts_started_together_join_one_cohort_per_engine(shared_engine: HFEngine, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from tests.models.test_cohorts import Recorder

    records = [json.loads(line) for line in write_toy_tasks(tmp_path / "t.jsonl", 5).read_text().splitlines()]
    tasks = [Task(prompt=r["question"], answer=r["answer"], index=i, repeat_times=2, workflow="toy_repeat")
             for i, r in enumerate(records)]
    engines = [Recorder(shared_engine), Recorder(shared_engine)]
    result = Scheduler(engines, runners_per_engine=3, sampling=SamplingParams(max_tokens=4)).run(tasks)
    assert not result.failures
    # runners 0..4 of the first burst use engines 0, 1, 0, 1, 0
    assert [(size, method) for _, size, method in engines[0].joins] == [(3, "chat")] * 3
    assert [(size, method) for _, size, method in engines[1].joins] == [(2, "chat")] * 2
    assert len({name for name, _, _ in engines[0].joins}) == 1 and len({name for name, _, _ in engines[1].joins}) == 1
    assert engines[0].joins[0][0] != engines[1].joins[0][0]
    again = Scheduler(engines, runners_per_engine=3).run(tasks[:1])
    assert not again.failures and engines[0].joins[-1][1] == 1 and engines[0].joins[-1][0] != engines[0].joins[0][0]


def _probe(index: int, key: str, *, repeat_times: int = 1, run_id_offset: int = 0, **args: object) -> Task:
    return Task(prompt=f"p{index}", index=index, workflow="test_probe", repeat_times=repeat_times,
                run_id_offset=run_id_offset, workflow_args={"key": key, **args})


def test_half_the_groups_timing_out_are_dropped_and_the_rest_returned_at_once() -> None:
    scheduler = Scheduler([VersionEngine(0)], runners_per_engine=4, timeout=0.5, max_retries=0)
    tasks = [_probe(i, "half", repeat_times=2, **({"stall_attempts": -1, "stall_s": 30.0} if i % 2 else {}))
             for i in range(4)]
    started = time.monotonic()
    result = scheduler.run(tasks)
    assert time.monotonic() - started < 5.0  # the stalled tasks are abandoned at their deadline
    assert {e.info["task_index"] for e in result.experiences} == {0, 2}
    assert result.metrics["dropped_groups"] == 2 and result.metrics["dropped_rollouts"] == 4
    assert result.metrics["complete_groups"] == 2 and result.metrics["timeouts"] == 2


def test_a_group_split_over_runners_is_dropped_whole_when_one_part_fails() -> None:
    scheduler = Scheduler([VersionEngine(0)], runners_per_engine=4, timeout=30, max_retries=1)
    # record 0's four repeats on two tasks; the second part fails every attempt; record 1 is fine
    tasks = [_probe(0, "split", repeat_times=2), _probe(0, "split", repeat_times=2, run_id_offset=2,
                                                        fail_attempts=-1, work_s=0.2),
             _probe(1, "split-ok", repeat_times=2, run_id_offset=0)]
    result = scheduler.run(tasks)
    assert result.results[0] is None and result.results[1] is None  # the part that succeeded is dropped too
    assert [e.group_id for e in result.experiences] == [tasks[2].group_id] * 2
    assert result.metrics["dropped_groups"] == 1 and result.metrics["dropped_rollouts"] == 4
    assert [f.position for f in result.failures] == [1]


def test_a_retry_waits_for_another_engine_rather_than_going_back() -> None:
    scheduler = Scheduler([VersionEngine(0), VersionEngine(1)], runners_per_engine=1, timeout=30, max_retries=1)
    # task 0 fails at once on engine 0 while engine 1 is busy: the only free runner is engine 0's
    tasks = [_probe(0, "avoid", fail_attempts=1), _probe(1, "avoid-busy", work_s=0.3)]
    result = scheduler.run(tasks)
    assert not result.failures
    assert result.results[0][0].info["attempt"] == 2  # type: ignore[index]
    assert result.results[0][0].info["engine"] == 1  # type: ignore[index]


def test_over_rollout_returns_the_first_complete_groups_after_the_minimum_wait() -> None:
    scheduler = Scheduler([VersionEngine(0)], runners_per_engine=4, timeout=60, max_retries=0,
                          over_rollout_ratio=0.5, wait_after_min=0.3)
    slow = {"stall_attempts": -1, "stall_s": 20.0}
    tasks = [_probe(i, "over", repeat_times=2, **(slow if i >= 2 else {"work_s": 0.05})) for i in range(4)]
    assert scheduler.min_groups(tasks) == 2
    started = time.monotonic()
    result = scheduler.run(tasks)
    elapsed = time.monotonic() - started
    assert 0.3 <= elapsed < 5.0  # waited wait_after_min for more, not for the slow groups
    assert {e.info["task_index"] for e in result.experiences} == {0, 1}
    assert result.metrics["abandoned_groups"] == 2 and result.metrics["dropped_groups"] == 0
    assert not result.failures
    # evaluation is never cut short by over-rollout
    assert scheduler.min_groups([dataclasses.replace(t, is_eval=True) for t in tasks]) == 4


def test_over_rollout_settings_come_from_the_config() -> None:
    plan = make_plan({"explorer.over_rollout.ratio": 0.25, "explorer.over_rollout.wait_after_min": 2.0,
                      "synchronizer.sync_style": "trainer_driven"})
    scheduler = Scheduler.from_plan([VersionEngine(0)], plan)
    assert scheduler.over_rollout_ratio == 0.25 and scheduler.wait_after_min == 2.0
    assert scheduler.min_groups(probe_tasks(8, "cfg")) == 6
    with pytest.raises(ValueError, match="over_rollout_ratio"):
        Scheduler([VersionEngine(0)], over_rollout_ratio=1.0)
    with pytest.raises(ConfigError, match=r"^explorer\.over_rollout\.ratio: 1\.5 is outside \[0, 1\)"):
        make_plan({"explorer.over_rollout.ratio": 1.5})
