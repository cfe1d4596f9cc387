"""Batches across epochs, seeded shuffles and random draws, total_steps, and resuming from a saved position."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.plans import make_plan
from trinity.buffer import TaskPosition, TaskPositionError, TaskScheduler, load_tasks


def flat(batches: list[list[int]]) -> list[int]:
    return [t for b in batches for t in b]


def test_batches_cover_each_epoch_and_straddle_boundaries() -> None:
    scheduler = TaskScheduler(list(range(5)), 2, total_epochs=2)
    batches = list(scheduler)
    assert batches == [[0, 1], [2, 3], [4, 0], [1, 2], [3, 4]]
    assert scheduler.total_batches == 5
    assert scheduler.finished and scheduler.next_batch() is None
    assert scheduler.position == TaskPosition(epoch=2, index=0, step=5)


def test_batches_with_epochs_say_which_epoch_each_task_is_served_in() -> None:
    scheduler = TaskScheduler(["a", "b", "c"], 2, total_epochs=2)
    assert scheduler.next_batch_with_epochs() == [(0, "a"), (0, "b")]
    assert scheduler.next_batch_with_epochs() == [(0, "c"), (1, "a")]
    assert scheduler.position.step == 2


def test_last_batch_may_be_short_unless_drop_last() -> None:
    assert list(TaskScheduler(list(range(5)), 3)) == [[0, 1, 2], [3, 4]]
    scheduler = TaskScheduler(list(range(5)), 3, drop_last=True)
    assert list(scheduler) == [[0, 1, 2]]
    assert scheduler.total_batches == 1


def test_shuffle_is_seeded_per_epoch() -> None:
    tasks = list(range(20))
    run = list(TaskScheduler(tasks, 20, total_epochs=3, selector="shuffle", seed=1))
    again = list(TaskScheduler(tasks, 20, total_epochs=3, selector="shuffle", seed=1))
    other_seed = list(TaskScheduler(tasks, 20, total_epochs=3, selector="shuffle", seed=2))
    assert run == again
    assert run != other_seed
    assert all(sorted(epoch) == tasks for epoch in run)  # each epoch is a permutation
    assert run[0] != run[1] != run[2]  # a new order each epoch
    assert run[0] != tasks


def test_random_selector_draws_with_replacement_seeded_per_epoch() -> None:
    tasks = list(range(20))
    run = list(TaskScheduler(tasks, 20, total_epochs=3, selector="random", seed=1))
    assert run == list(TaskScheduler(tasks, 20, total_epochs=3, selector="random", seed=1))
    assert run != list(TaskScheduler(tasks, 20, total_epochs=3, selector="random", seed=2))
    assert all(len(epoch) == 20 and set(epoch) <= set(tasks) for epoch in run)
    assert any(len(set(epoch)) < 20 for epoch in run)  # with replacement: some task drawn twice
    first = TaskScheduler(tasks, 7, total_epochs=3, selector="random", seed=1)
    head = [first.next_batch(), first.next_batch()]
    resumed = TaskScheduler(tasks, 7, total_epochs=3, selector="random", seed=1)
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    assert flat(head + list(resumed)) == flat(run)


def test_total_steps_overrides_epochs() -> None:
    scheduler = TaskScheduler(list(range(3)), 2, total_epochs=1, total_steps=4)
    batches = list(scheduler)
    assert batches == [[0, 1], [2, 0], [1, 2], [0, 1]]
    assert scheduler.total_batches == 4
    short = TaskScheduler(list(range(10)), 2, total_epochs=5, total_steps=2)
    assert list(short) == [[0, 1], [2, 3]]


@pytest.mark.parametrize("selector", ["sequential", "shuffle"])
def test_resume_continues_with_exactly_the_next_batch(selector: str) -> None:
    tasks = list(range(7))
    settings = {"total_epochs": 3, "selector": selector, "seed": 5}
    reference = list(TaskScheduler(tasks, 3, **settings))
    for cut in range(len(reference) + 1):
        first = TaskScheduler(tasks, 3, **settings)
        served = [first.next_batch() for _ in range(cut)]
        saved = json.loads(json.dumps(first.state_dict()))  # what a checkpoint stores
        resumed = TaskScheduler(tasks, 3, **settings)
        resumed.load_state_dict(saved)
        assert served + list(resumed) == reference, f"cut after {cut} batches"
    # every task served total_epochs times, none lost or repeated
    assert sorted(flat(reference)) == sorted(tasks * 3)


def test_resume_with_total_steps_stops_at_the_same_step() -> None:
    first = TaskScheduler(list(range(4)), 3, total_steps=5, selector="shuffle", seed=3)
    head = [first.next_batch(), first.next_batch()]
    resumed = TaskScheduler(list(range(4)), 3, total_steps=5, selector="shuffle", seed=3)
    resumed.load_state_dict(first.state_dict())
    tail = list(resumed)
    assert len(tail) == 3
    assert head + tail == list(TaskScheduler(list(range(4)), 3, total_steps=5, selector="shuffle", seed=3))


def test_restore_refuses_a_changed_task_set_or_seed() -> None:
    scheduler = TaskScheduler(list(range(6)), 2, selector="shuffle", seed=1)
    scheduler.next_batch()
    state = scheduler.state_dict()
    with pytest.raises(TaskPositionError, match="num_tasks 6 -> 5"):
        TaskScheduler(list(range(5)), 2, selector="shuffle", seed=1).load_state_dict(state)
    with pytest.raises(TaskPositionError, match="seed 1 -> 2"):
        TaskScheduler(list(range(6)), 2, selector="shuffle", seed=2).load_state_dict(state)
    with pytest.raises(TaskPositionError, match="malformed"):
        TaskScheduler(list(range(6)), 2).load_state_dict({"epoch": 0})
    with pytest.raises(TaskPositionError, match="outside the task set"):
        TaskScheduler(list(range(6)), 2).load_state_dict({"epoch": 0, "index": 6, "step": 3})


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(ValueError, match="at least one task"):
        TaskScheduler([], 2)
    with pytest.raises(ValueError, match="batch_size"):
        TaskScheduler([1], 0)
    with pytest.raises(ValueError, match="selector must be sequential, shuffle, random or a registered selector"):
        TaskScheduler([1], 1, selector="difficulty")


def test_for_training_reads_the_configured_task_set(tmp_path: Path) -> None:
    file = tmp_path / "train.jsonl"
    file.write_text("".join(json.dumps({"question": f"q{i}", "answer": str(i)}) + "\n" for i in range(5)))
    plan = make_plan({
        "buffer.batch_size": 2, "buffer.total_epochs": 2, "buffer.explorer_input.taskset.path": str(file),
        "buffer.explorer_input.taskset.data_selector.selector_type": "sequential",
        "buffer.explorer_input.eval_tasksets": [{"name": "eval", "path": str(file),
                                                 "format": {"prompt_key": "question", "response_key": "answer"},
                                                 "data_selector": {"selector_type": "shuffle"}}],
    })
    scheduler = TaskScheduler.for_training(plan.buffer)
    batch = scheduler.next_batch()
    assert batch is not None and [r["prompt"] for r in batch] == ["q0", "q1"]
    assert scheduler.total_batches == 5
    (eval_set,) = plan.buffer.eval_tasksets
    # evaluation (trinity.launcher.evaluation) reads every task once, in file order, whatever the set's selector
    assert [r["prompt"] for r in load_tasks(eval_set)] == [f"q{i}" for i in range(5)]


def test_for_training_follows_the_data_selector_and_total_steps(tmp_path: Path) -> None:
    file = tmp_path / "train.jsonl"
    file.write_text("".join(json.dumps({"question": f"q{i}", "answer": str(i)}) + "\n" for i in range(6)))
    plan = make_plan({
        "buffer.batch_size": 3, "buffer.total_epochs": 4, "buffer.total_steps": 3,
        "buffer.explorer_input.taskset.path": str(file),
        "buffer.explorer_input.taskset.data_selector": {"selector_type": "shuffle", "seed": 9},
    })
    scheduler = TaskScheduler.for_training(plan.buffer)
    assert (scheduler.selector, scheduler.seed, scheduler.total_batches) == ("shuffle", 9, 3)
    prompts = [r["prompt"] for b in scheduler for r in b]
    expected = TaskScheduler([f"q{i}" for i in range(6)], 3, total_epochs=4, total_steps=3, selector="shuffle", seed=9)
    assert prompts == [p for b in expected for p in b]
