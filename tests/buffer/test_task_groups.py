"""A task's experiences are one group whatever their count: multi-step episodes, stored and sampled whole.

The shape is the guess-the-number agent's: 4 episodes per task, each 1 to 3
model calls, so a task stores between 4 and 12 experiences. Before groups
were sized by the explorer step, the pipeline and the sampler closed a group
after ``repeat_times`` (4) experiences: the advantages came from chunks of 4
and a training step took 2 of a step's 5 "groups".
"""

from __future__ import annotations

import pytest
import torch

from tests.buffer.factories import make_exp
from trinity.algorithm.advantage import ADVANTAGE_FNS, AdvantageInputs
from trinity.buffer import SampleStrategy, build_pipeline
from trinity.buffer.sampling import group_sizes, mark_group_sizes
from trinity.buffer.storage.local_queue import LocalQueueStorage
from trinity.common.experience import Experience, make_batch

REPEAT = 4


def episodes(group: str, calls: list[int], rewards: list[float]) -> list[Experience]:
    """Return the experiences of one task: episode ``i`` made ``calls[i]`` calls, each with the episode's reward."""
    out = []
    for run, (count, reward) in enumerate(zip(calls, rewards, strict=True)):
        out += [make_exp(group, run, reward=reward, step=step) for step in range(count)]
    return out


def step_of_two_tasks() -> list[Experience]:
    # as the scheduler returns them: task a's 4 episodes (3+3+2+1 calls), then task b's (1+1+3+2)
    return (episodes("a", [3, 3, 2, 1], [0.0, 1.0, 0.0, 1.0])
            + episodes("b", [1, 1, 3, 2], [1.0, 0.0, 0.0, 0.0]))


def test_a_step_sizes_each_group_by_every_experience_of_its_task() -> None:
    experiences = step_of_two_tasks()
    mark_group_sizes(experiences)
    assert [e.info["group_size"] for e in experiences] == [9] * 9 + [7] * 7
    assert group_sizes(experiences) == [9, 7]
    assert group_sizes([make_exp(""), make_exp(""), make_exp("a")]) == [1, 1, 1]  # no group id: a group each


def test_multi_step_advantages_are_computed_over_the_whole_task() -> None:
    out = stored_steps(step_of_two_tasks()).get(16, timeout=1)
    assert len(out) == 16 and {e.info["group_size"] for e in out if e.group_id == "a"} == {9}
    # the reference: the advantage function on the whole step at once
    expected, _ = ADVANTAGE_FNS.get("step_wise_grpo")(AdvantageInputs.from_batch(make_batch(step_of_two_tasks(), 0)))
    by_key = {(e.group_id, e.run_id, e.info["step"]): e for e in out}
    for row, exp in enumerate(step_of_two_tasks()):
        got = by_key[(exp.group_id, exp.run_id, exp.info["step"])].advantages
        assert got is not None
        start = exp.prompt_length - 1
        torch.testing.assert_close(got, expected[row, start:start + exp.response_length])
    # every step of an episode carries its episode's score; task a: rewards 0, 1, 0, 1 -> -/+ 0.866
    a = {run: {round(float(by_key[("a", run, s)].advantages[0]), 3) for s in range(n)}
         for run, n in enumerate([3, 3, 2, 1])}
    assert a == {0: {-0.866}, 1: {0.866}, 2: {-0.866}, 3: {0.866}}


def test_unsized_experiences_still_group_by_repeat_times() -> None:
    """Experiences that did not pass through an explorer step (no sizes) close a group at ``repeat_times``."""
    pipeline = build_pipeline(advantage_fn="step_wise_grpo", group_size=REPEAT)
    out = pipeline.process(step_of_two_tasks())
    assert [e.info["group_size"] for e in out] == [4] * 12  # three chunks of 4; the rest is held
    assert pipeline.held() == 4


def sampled(strategy: SampleStrategy) -> list[tuple[str, int]]:
    batch = strategy.sample(0, timeout=1)
    return [(group, sum(1 for e in batch if e.group_id == group)) for group in dict.fromkeys(e.group_id for e in batch)]


def stored_steps(*steps: list[Experience]) -> LocalQueueStorage:
    storage = LocalQueueStorage()
    pipeline = build_pipeline(advantage_fn="step_wise_grpo", group_size=REPEAT, storage=storage)
    for number, experiences in enumerate(steps):
        pipeline.write_step(experiences, batch=number)
    return storage


def test_a_training_step_takes_whole_tasks_whatever_their_count() -> None:
    storage = stored_steps(step_of_two_tasks(), episodes("c", [2, 2, 2, 2], [1.0, 0.0, 1.0, 0.0]))
    strategy = SampleStrategy(storage, batch_size=2, group_size=REPEAT)
    assert sampled(strategy) == [("a", 9), ("b", 7)]


def test_a_batch_counted_in_experiences_takes_the_whole_tasks_that_fit() -> None:
    storage = stored_steps(step_of_two_tasks(), episodes("c", [2, 2, 2, 2], [1.0, 0.0, 1.0, 0.0]))
    strategy = SampleStrategy(storage, batch_size=2, group_size=REPEAT, batch_rows=16)
    assert sampled(strategy) == [("a", 9), ("b", 7)]  # 16 fit exactly
    storage.close()
    assert sampled(strategy) == [("c", 8)]  # the rest, at the end of the buffer
    small = SampleStrategy(stored_steps(step_of_two_tasks()), batch_size=2, group_size=REPEAT, batch_rows=5)
    assert sampled(small) == [("a", 9)]  # a task larger than the batch is taken whole, alone
    assert sampled(small) == [("b", 7)]


def test_a_strategy_without_batch_rows_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from trinity.buffer import SAMPLE_STRATEGIES, make_sample_strategy

    def groups_only(storage: LocalQueueStorage, *, batch_size: int, group_size: int) -> SampleStrategy:
        return SampleStrategy(storage, batch_size=batch_size)

    monkeypatch.setitem(SAMPLE_STRATEGIES._items, "groups_only_for_test", groups_only)
    with pytest.raises(ValueError, match="cannot count a batch in experiences"):
        make_sample_strategy("groups_only_for_test", LocalQueueStorage(), batch_size=1, batch_rows=8)
