"""Sample strategies: whole groups in FIFO order, and the staleness-aware strategy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.buffer.factories import ids, make_exp, make_group
from trinity.buffer import (
    SAMPLE_STRATEGIES,
    BufferExhaustedError,
    SQLiteStorage,
    StalenessStrategy,
    StorageTimeoutError,
    make_sample_strategy,
)
from trinity.utils.registry import UnknownNameError


@pytest.fixture
def storage(tmp_path: Path) -> SQLiteStorage:
    return SQLiteStorage(tmp_path / "buf.sqlite", poll_interval=0.01)


def group_ids(batch: list) -> list[str]:
    return list(dict.fromkeys(e.group_id for e in batch))


def test_default_returns_whole_groups_in_fifo_order(storage: SQLiteStorage) -> None:
    for name in ("a", "b", "c", "d", "e"):
        storage.put(make_group(name, 3))
    strategy = make_sample_strategy("default", storage, batch_size=2, group_size=3)
    first = strategy.sample(trainer_version=0, timeout=1)
    assert ids(first) == [(g, r) for g in ("a", "b") for r in range(3)]
    assert group_ids(strategy.sample(0, timeout=1)) == ["c", "d"]
    assert strategy.metrics()["sampled_groups"] == 4


def test_groups_split_across_reads_are_held_until_complete(storage: SQLiteStorage) -> None:
    # the members of group "b" arrive in two writes, interleaved with group "c"
    storage.put(make_group("a", 4))
    storage.put(make_group("b", 4)[:2])
    storage.put(make_group("c", 4))
    storage.put(make_group("b", 4)[2:])
    strategy = make_sample_strategy("default", storage, batch_size=2, group_size=4)
    batch = strategy.sample(0, timeout=1)
    assert group_ids(batch) == ["a", "c"]  # "c" completed before "b"
    storage.put(make_group("d", 4))
    batch = strategy.sample(0, timeout=1)
    assert ids(batch) == [("b", i) for i in range(4)] + [("d", i) for i in range(4)]  # b's members together


def test_info_group_size_and_ungrouped_experiences(storage: SQLiteStorage) -> None:
    storage.put([make_exp("short", i, group_size=2) for i in range(2)])  # a group that lost two rollouts
    storage.put([make_exp("", 0), make_exp("", 1)])  # SFT-like rows: each its own group
    strategy = make_sample_strategy("default", storage, batch_size=3, group_size=4)
    assert ids(strategy.sample(0, timeout=1)) == [("short", 0), ("short", 1), ("", 0), ("", 1)]


def test_a_timeout_keeps_every_group_taken_so_far(storage: SQLiteStorage) -> None:
    storage.put(make_group("a", 2))
    storage.put(make_group("b", 2)[:1])
    strategy = make_sample_strategy("default", storage, batch_size=2, group_size=2)
    with pytest.raises(StorageTimeoutError):
        strategy.sample(0, timeout=0.1)
    storage.put(make_group("b", 2)[1:])
    assert ids(strategy.sample(0, timeout=1)) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]


def test_end_of_stream_gives_a_short_last_batch_then_exhaustion(storage: SQLiteStorage) -> None:
    storage.put(make_group("a", 2))
    storage.put(make_group("b", 2)[:1])  # incomplete forever
    storage.close()
    strategy = make_sample_strategy("default", storage, batch_size=4, group_size=2)
    assert ids(strategy.sample(0, timeout=1)) == [("a", 0), ("a", 1), ("b", 0)]
    with pytest.raises(BufferExhaustedError):
        strategy.sample(0, timeout=1)


def test_state_dict_carries_held_experiences_through_a_checkpoint(storage: SQLiteStorage) -> None:
    storage.put([make_exp("solo", 0, group_size=1), make_exp("b", 0)])
    strategy = make_sample_strategy("default", storage, batch_size=1, group_size=2)
    assert ids(strategy.sample(0, timeout=1)) == [("solo", 0)]  # the same read took b0, now held
    state = json.loads(json.dumps(strategy.state_dict()))
    assert [d["group_id"] for d in state["held"]] == ["b"]
    assert state["storage"] == {"read_offset": 2}
    # a restarted trainer on the same file: b0 is neither lost nor read twice
    restored = make_sample_strategy("default", SQLiteStorage(storage.path, poll_interval=0.01), batch_size=1,
                                    group_size=2)
    restored.load_state_dict(state)
    storage.put([make_exp("b", 1)])
    assert ids(restored.sample(0, timeout=1)) == [("b", 0), ("b", 1)]
    assert restored.metrics()["sampled_groups"] == 2


def test_staleness_drop_skips_old_groups_and_fills_the_batch(storage: SQLiteStorage) -> None:
    storage.put(make_group("old", 2, version=1))
    storage.put(make_group("ok", 2, version=3))
    storage.put(make_group("new", 2, version=5))
    strategy = make_sample_strategy("staleness", storage, batch_size=2, group_size=2, max_staleness=2)
    batch = strategy.sample(trainer_version=5, timeout=1)
    assert group_ids(batch) == ["ok", "new"]
    metrics = strategy.metrics()
    assert metrics["stale_dropped_groups"] == 1 and metrics["max_seen_staleness"] == 4


def test_staleness_down_weight_scales_advantages(storage: SQLiteStorage) -> None:
    old = [make_exp("old", i, version=0) for i in range(2)]
    for exp in old:
        exp.advantages = torch.full((exp.response_length,), 2.0)
    storage.put(old)
    storage.put(make_group("fresh", 2, version=4))
    strategy = StalenessStrategy(storage, batch_size=2, group_size=2, max_staleness=1, mode="down_weight", decay=0.5)
    batch = strategy.sample(trainer_version=4, timeout=1)
    assert group_ids(batch) == ["old", "fresh"]
    # staleness 4, limit 1: weight 0.5 ** 3
    assert torch.allclose(batch[0].advantages, torch.full((4,), 2.0 * 0.125))
    assert batch[0].info["sample_weight"] == 0.125
    assert "sample_weight" not in batch[2].info and batch[2].advantages is None
    assert strategy.metrics()["stale_weighted_groups"] == 1


def test_a_group_given_back_after_a_timeout_is_weighted_once(storage: SQLiteStorage) -> None:
    old = [make_exp("old", i, version=0) for i in range(2)]
    for exp in old:
        exp.advantages = torch.ones(exp.response_length)
    storage.put(old)
    strategy = StalenessStrategy(storage, batch_size=2, group_size=2, max_staleness=1, mode="down_weight", decay=0.5)
    with pytest.raises(StorageTimeoutError):
        strategy.sample(trainer_version=3, timeout=0.05)
    storage.put(make_group("fresh", 2, version=3))
    batch = strategy.sample(trainer_version=3, timeout=1)
    assert group_ids(batch) == ["old", "fresh"]
    assert batch[0].info["sample_weight"] == 0.25 and torch.allclose(batch[0].advantages, torch.full((4,), 0.25))
    assert strategy.metrics()["stale_weighted_groups"] == 1


def test_registry_and_option_errors(storage: SQLiteStorage) -> None:
    # upstream's names too: ``warmup`` (its deprecated name of default) and ``staleness_control``
    assert SAMPLE_STRATEGIES.names() == ["default", "mix", "staleness", "staleness_control", "warmup"]
    with pytest.raises(UnknownNameError, match="did you mean 'staleness'"):
        make_sample_strategy("stalenes", storage, batch_size=1)
    with pytest.raises(ValueError, match="has no option 'max_stale'"):
        make_sample_strategy("staleness", storage, batch_size=1, max_stale=1)
    with pytest.raises(ValueError, match="mode must be"):
        make_sample_strategy("staleness", storage, batch_size=1, mode="ignore")


def test_upstream_names_warmup_and_staleness_control(storage: SQLiteStorage) -> None:
    assert type(make_sample_strategy("warmup", storage, batch_size=1)) is type(
        make_sample_strategy("default", storage, batch_size=1))
    storage.put(make_group("old", 2, version=0))
    storage.put(make_group("fresh", 2, version=3))
    strategy = make_sample_strategy("staleness_control", storage, batch_size=1, group_size=2, max_staleness=1)
    assert isinstance(strategy, StalenessStrategy)
    assert group_ids(strategy.sample(trainer_version=3, timeout=1)) == ["fresh"]  # "old" is 3 versions stale: dropped
    unlimited = make_sample_strategy("staleness_control", storage, batch_size=1, group_size=2)
    storage.put(make_group("ancient", 2, version=0))
    assert group_ids(unlimited.sample(trainer_version=1000, timeout=1)) == ["ancient"]
    with pytest.raises(ValueError, match="has no option 'mode'"):
        make_sample_strategy("staleness_control", storage, batch_size=1, mode="drop")
