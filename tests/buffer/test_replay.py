"""Experience replay: the pool's priority queue semantics, its rollback to a checkpoint's tick, the strategy.

The pool runs on a real SQLite file; its clock is passed in, so cooldowns
end when a test moves the time on instead of after real sleeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.buffer.factories import make_group
from trinity.buffer import SQLiteStorage, StorageTimeoutError, make_sample_strategy
from trinity.buffer.replay import ReplayPool, ReplayStrategy, make_priority_function, split_groups
from trinity.common.experience import Experience
from trinity.utils.registry import UnknownNameError


class Clock:
    """Seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pool_at(path: Path, clock: Clock, *, fn: str = "linear_decay", args: dict[str, Any] | None = None,
            capacity: int = 0, cooldown: float | None = 10.0) -> ReplayPool:
    pool = ReplayPool(path, priority_fn=make_priority_function(fn, args), capacity=capacity, cooldown=cooldown,
                      clock=clock)
    pool.rollback(0)
    return pool


def names(groups: Sequence[Sequence[Experience]]) -> list[str]:
    return [g[0].group_id for g in groups]


def test_serves_highest_priority_first_and_brings_groups_back_after_their_cooldown(tmp_path: Path) -> None:
    clock = Clock()
    pool = pool_at(tmp_path / "pool.sqlite", clock, args={"decay": 0.5})
    pool.begin_tick()
    pool.add([make_group("a", 2, version=1), make_group("b", 2, version=2)])
    assert names(pool.take(groups=1)) == ["b"]  # version 2 ranks above version 1
    assert names(pool.take(groups=1)) == ["a"]
    assert pool.take(groups=1) == [] and pool.cooling_groups() == 2
    assert pool.next_ready_in() == pytest.approx(10.0)
    clock.now += 9.9
    pool.refresh()
    assert pool.ready_groups() == 0  # still cooling down
    clock.now += 0.1
    pool.begin_tick()
    pool.refresh()  # b: 2 - 0.5 = 1.5, a: 1 - 0.5 = 0.5
    pool.add([make_group("c", 2, version=1)])  # c: 1
    batch = pool.take(groups=3)
    assert names(batch) == ["b", "c", "a"]
    assert [g[0].info["use_count"] for g in batch] == [2, 1, 2]  # uses so far, this one included
    assert all(e.info["model_version"] == e.model_version for g in batch for e in g)
    assert pool.use_counts() == {"a": 2, "b": 2, "c": 1}


def test_equal_priorities_are_served_first_in_first_out(tmp_path: Path) -> None:
    pool = pool_at(tmp_path / "pool.sqlite", Clock())
    pool.begin_tick()
    pool.add([make_group(name, 1) for name in ("x", "y", "z")])
    assert names(pool.take(groups=3)) == ["x", "y", "z"]


def test_capacity_pushes_out_the_lowest_priority_or_refuses_a_lower_one(tmp_path: Path) -> None:
    pool = pool_at(tmp_path / "pool.sqlite", Clock(), capacity=4)
    pool.begin_tick()
    pool.add([make_group("a", 2, version=3), make_group("b", 2, version=1)])
    assert pool.add([make_group("c", 2, version=0)]) == 0  # ranks below every group there: left out
    assert pool.ready_rows() == 4
    assert pool.add([make_group("d", 2, version=2)]) == 1  # pushes b (priority 1) out
    assert names(pool.take(groups=5)) == ["a", "d"]
    assert pool.counters["evicted_groups"] == 2
    big = pool_at(tmp_path / "big.sqlite", Clock(), capacity=3)
    big.begin_tick()
    big.add([make_group("small", 1, version=0), make_group("large", 5, version=1)])
    assert names(big.take(groups=2)) == ["large"]  # larger than the capacity: it pushes every other one out


def test_capacity_keeps_the_freshest_groups_as_upstreams_queue_does(tmp_path: Path) -> None:
    pool = pool_at(tmp_path / "pool.sqlite", Clock(), args={"decay": 0.6}, capacity=8, cooldown=None)
    pool.begin_tick()
    for version in range(12):  # one experience each, versions 0..11, into room for 8
        pool.add([make_group(f"v{version}", 1, version=version)])
    assert pool.ready_groups() == 8
    batch = pool.take(groups=8)
    assert [g[0].model_version for g in batch] == list(range(11, 3, -1))
    assert all(g[0].info["use_count"] == 1 for g in batch)
    assert pool.take(groups=1) == []


def test_decay_limit_randomization_retires_a_group_after_its_use_count_limit(tmp_path: Path) -> None:
    clock = Clock()
    pool = pool_at(tmp_path / "pool.sqlite", clock, fn="decay_limit_randomization",
                   args={"use_count_limit": 2}, cooldown=0.0)
    pool.begin_tick()
    pool.add([make_group("a", 2)])
    served = 0
    for _ in range(5):
        pool.begin_tick()
        pool.refresh()
        served += len(pool.take(groups=1))
    assert served == 2
    assert pool.use_counts() == {"a": 2}
    assert pool.ready_groups() == pool.cooling_groups() == 0
    assert pool.counters["retired_groups"] == 1


def test_without_a_cooldown_each_group_is_used_once(tmp_path: Path) -> None:
    pool = pool_at(tmp_path / "pool.sqlite", Clock(), cooldown=None)
    pool.begin_tick()
    pool.add([make_group("a", 1), make_group("b", 1)])
    assert names(pool.take(groups=2)) == ["a", "b"]
    pool.begin_tick()
    pool.refresh()
    assert pool.take(groups=2) == [] and pool.cooling_groups() == 0


def test_rollback_returns_the_pool_to_a_tick_also_in_a_new_process(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "pool.sqlite"
    pool = pool_at(path, clock, args={"decay": 1.0}, cooldown=0.0)
    pool.begin_tick()  # tick 1
    pool.add([make_group("a", 1), make_group("b", 1)])
    assert names(pool.take(groups=1)) == ["a"]
    clock.now += 1
    pool.begin_tick()  # tick 2
    pool.refresh()
    assert names(pool.take(groups=1)) == ["b"]  # b: 0 beats a: -1
    saved = pool.tick
    clock.now += 1
    pool.begin_tick()  # tick 3, lost to a kill
    pool.refresh()
    pool.add([make_group("c", 1, version=5)])
    assert names(pool.take(groups=2)) == ["c", "a"]
    assert pool.use_counts() == {"a": 2, "b": 1, "c": 1}
    pool.close()

    again = ReplayPool(path, priority_fn=make_priority_function("linear_decay", {"decay": 1.0}), cooldown=0.0,
                       clock=clock)
    assert again.rollback(saved) == 1  # c, added after the checkpoint
    assert again.tick == saved
    assert again.use_counts() == {"a": 1, "b": 1}
    again.begin_tick()
    again.refresh()
    assert names(again.take(groups=3)) == ["a", "b"]  # back from cooldown in the order it ended

    gone = pool_at(tmp_path / "gone.sqlite", clock, cooldown=None)
    gone.begin_tick()
    gone.add([make_group("a", 1), make_group("b", 1)])
    gone.begin_tick()
    assert names(gone.take(groups=1)) == ["a"]  # leaves for good (no cooldown) in tick 2
    gone.rollback(1)
    assert gone.ready_groups() == 2 and gone.use_counts() == {}


def test_split_groups_cuts_runs_of_one_group() -> None:
    experiences = [*make_group("a", 2), *make_group("b", 1), Experience(tokens=[1, 2], prompt_length=1)]
    assert [len(g) for g in split_groups(experiences)] == [2, 1, 1]


@pytest.fixture
def storage(tmp_path: Path) -> SQLiteStorage:
    return SQLiteStorage(tmp_path / "buf.sqlite", poll_interval=0.01)


def replay_strategy(storage: SQLiteStorage, path: Path, clock: Clock, **kwargs: Any) -> ReplayStrategy:
    inner = make_sample_strategy("default", storage, batch_size=1, group_size=2)
    pool = ReplayPool(path, priority_fn=make_priority_function("linear_decay", {"decay": 2.0}), cooldown=0.0,
                      clock=clock)
    return ReplayStrategy(inner, pool, **kwargs)


def test_strategy_takes_a_batch_of_the_fresh_size_by_priority(storage: SQLiteStorage, tmp_path: Path) -> None:
    clock = Clock()
    storage.put(make_group("a", 2, version=0))
    storage.put(make_group("b", 2, version=0))
    strategy = replay_strategy(storage, tmp_path / "pool.sqlite", clock)
    assert split_groups(strategy.sample(0, timeout=1))[0][0].group_id == "a"
    clock.now += 1
    batch = strategy.sample(1, timeout=1)  # fresh b (0) beats a back from cooldown (0 - 2)
    assert [e.group_id for e in batch] == ["b", "b"]
    with pytest.raises(StorageTimeoutError):
        strategy.sample(2, timeout=0.05)  # nothing fresh, and no serving from the pool unless asked
    assert strategy.can_replay()
    replayed = strategy.sample_replay(2)
    assert [e.group_id for e in replayed] == ["a", "a"] and replayed[0].info["use_count"] == 2
    stats = strategy.stats
    assert stats["replay/reused_groups"] == 1 and stats["replay/replay_only_batches"] == 1
    assert stats["replay/batch_max_use_count"] == 2 and stats["replay/batch_max_staleness"] == 2
    assert stats["sampled_groups"] == 2  # the inner strategy's counters are there too


def test_strategy_state_rolls_the_pool_back_with_the_read_position(storage: SQLiteStorage, tmp_path: Path) -> None:
    clock = Clock()
    for name in ("a", "b", "c"):
        storage.put(make_group(name, 2))
    strategy = replay_strategy(storage, tmp_path / "pool.sqlite", clock)
    strategy.sample(0, timeout=1)
    state = strategy.state_dict()
    assert state["replay_tick"] == 1 and state["storage"]
    strategy.sample(1, timeout=1)
    strategy.sample(2, timeout=1)
    assert strategy.pool.use_counts() == {"a": 1, "b": 1, "c": 1}
    strategy.pool.close()

    resumed = replay_strategy(SQLiteStorage(storage.path), tmp_path / "pool.sqlite", clock)
    resumed.load_state_dict(state)
    assert resumed.pool.use_counts() == {"a": 1}
    assert [e.group_id for e in resumed.sample(1, timeout=1)] == ["b", "b"]


def test_strategy_serves_the_pool_when_a_read_times_out_only_if_asked(storage: SQLiteStorage, tmp_path: Path) -> None:
    clock = Clock()
    storage.put(make_group("a", 2))
    strategy = replay_strategy(storage, tmp_path / "pool.sqlite", clock, replay_when_starved=True)
    strategy.sample(0, timeout=1)
    clock.now += 1
    again = strategy.sample(1, timeout=0.05)
    assert [e.group_id for e in again] == ["a", "a"] and again[0].info["use_count"] == 2


def test_a_fresh_strategy_starts_with_an_empty_pool(storage: SQLiteStorage, tmp_path: Path) -> None:
    clock = Clock()
    storage.put(make_group("old", 2))
    first = replay_strategy(storage, tmp_path / "pool.sqlite", clock)
    first.sample(0, timeout=1)
    storage.put(make_group("new", 2))
    second = replay_strategy(storage, tmp_path / "pool.sqlite", clock, replay_when_starved=True)
    assert [e.group_id for e in second.sample(0, timeout=1)] == ["new", "new"]
    assert second.pool.use_counts() == {"new": 1}  # the earlier run's group is not in a run that restored nothing


def test_upstream_priority_function_code_runs_unchanged(tmp_path: Path) -> None:
    from trinity.buffer.storage import PRIORITY_FUNC
    from trinity.buffer.storage.queue import PriorityFunction

    @PRIORITY_FUNC.register_module("reward_first_for_test")
    class RewardFirst(PriorityFunction):
        def __init__(self, bonus: float = 0.0, limit: int = 1) -> None:
            self.bonus = bonus
            self.limit = limit

        def __call__(self, item: list[Experience]) -> tuple[float, bool]:
            return sum(e.reward or 0.0 for e in item) + self.bonus, item[0].info["use_count"] < self.limit

        @classmethod
        def default_config(cls) -> dict[str, Any]:
            return {"bonus": 0.0, "limit": 1}

    fn = make_priority_function("reward_first_for_test", {"bonus": 1.0})
    assert isinstance(fn, RewardFirst) and fn.bonus == 1.0 and fn.limit == 1
    pool = ReplayPool(tmp_path / "pool.sqlite", priority_fn=fn, cooldown=0.0, clock=Clock())
    pool.rollback(0)
    pool.begin_tick()
    pool.add([make_group("low", 2, rewards=[0.0, 0.0]), make_group("high", 2, rewards=[1.0, 1.0])])
    assert names(pool.take(groups=2)) == ["high", "low"]
    pool.refresh()
    assert pool.ready_groups() == 0  # its limit of one use retired both
    with pytest.raises(ValueError, match="does not take"):
        make_priority_function("reward_first_for_test", {"gamma": 1})
    with pytest.raises(UnknownNameError, match="did you mean 'linear_decay'"):
        make_priority_function("linear_decai")


def test_asking_whether_the_pool_can_replay_never_changes_a_saved_tick(storage: SQLiteStorage, tmp_path: Path) -> None:
    clock = Clock()
    storage.put(make_group("a", 2))
    inner = make_sample_strategy("default", storage, batch_size=1, group_size=2)
    pool = ReplayPool(tmp_path / "pool.sqlite", cooldown=0.0, clock=clock,
                      priority_fn=make_priority_function("decay_limit_randomization", {"use_count_limit": 1}))
    strategy = ReplayStrategy(inner, pool)
    strategy.sample(0, timeout=1)
    saved = strategy.state_dict()["replay_tick"]
    clock.now += 1
    assert not strategy.can_replay()  # a is back from cooldown and out of uses: it retires, in a later tick
    assert pool.cooling_groups() == 0 and pool.tick > saved
    pool.rollback(saved)
    assert pool.cooling_groups() == 1  # as the checkpoint saw it: cooling down, not retired
