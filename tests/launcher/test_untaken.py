"""What mode both's training steps take of the explored batches: whole tasks, by count or by experiences."""

from __future__ import annotations

from trinity.launcher.untaken import StepTake, UntakenBatches


def test_steps_by_tasks_take_groups_per_step_places_whatever_the_groups_hold() -> None:
    batches = UntakenBatches(groups_per_step=2)
    batches.add([9, 7], dropped=0)
    assert batches.next_step() == StepTake(places=2, groups=2, rows=16)
    batches.add([3], dropped=1)
    assert batches.full_steps() == 2
    assert batches.take(2) == (2, 16)
    assert batches.next_step() == StepTake(places=2, groups=1, rows=3)  # a dropped group keeps its place


def test_steps_by_experiences_take_the_whole_tasks_that_fit() -> None:
    batches = UntakenBatches(groups_per_step=2, rows_per_step=16)
    batches.add([9, 5], dropped=1)
    assert batches.next_step() is None  # 14 rows: the next task may still fit
    assert batches.next_step(final=True) == StepTake(places=3, groups=2, rows=14)
    batches.add([4, 10], dropped=0)
    assert batches.next_step() == StepTake(places=3, groups=2, rows=14)  # 14 + 4 would be 18
    assert batches.full_steps() == 1  # then 4 + 10 = 14 rows, still open
    assert batches.take(3) == (2, 14)
    assert batches.next_step(final=True) == StepTake(places=2, groups=2, rows=14)


def test_a_task_larger_than_the_batch_is_a_step_of_its_own() -> None:
    batches = UntakenBatches(groups_per_step=1, rows_per_step=8)
    batches.add([20, 3], dropped=0)
    assert batches.next_step() == StepTake(places=1, groups=1, rows=20)


def test_groups_the_strategy_consumed_early_are_removed_when_their_batch_comes() -> None:
    batches = UntakenBatches(groups_per_step=1)
    batches.add([2], dropped=0)
    batches.take(1)
    batches.absorb(1)  # the strategy dropped a stale group and read the next batch's first one already
    assert batches.owed == 1
    batches.add([2, 2], dropped=0)
    assert batches.places() == 1
    restored = UntakenBatches(groups_per_step=1)
    restored.load(batches.state(), group_size=2)
    assert restored.state() == batches.state() == [[[2], 0]]


def test_a_checkpoint_of_counts_only_loads_with_the_group_size() -> None:
    batches = UntakenBatches(groups_per_step=2, rows_per_step=8)
    batches.load([[2, 1], ["owed", 1]], group_size=4)
    assert batches.state() == [[[4, 4], 1], ["owed", 1]]
