"""Groups the explorer dropped: the pipeline says how many with each step, the sampler counts them toward a batch."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.buffer.factories import make_group
from trinity.buffer import BufferExhaustedError, SQLiteStorage, StorageTimeoutError, make_sample_strategy
from trinity.buffer.pipeline import ExperiencePipeline


@pytest.fixture
def storage(tmp_path: Path) -> SQLiteStorage:
    return SQLiteStorage(tmp_path / "buf.sqlite", poll_interval=0.01)


def group_ids(batch: list) -> list[str]:
    return list(dict.fromkeys(e.group_id for e in batch))


def test_each_stored_step_says_how_many_groups_it_stored_and_dropped(storage: SQLiteStorage) -> None:
    pipeline = ExperiencePipeline(storage=storage)
    stored = pipeline.write_step(make_group("a", 2) + make_group("b", 2), batch=0, dropped_groups=2)
    assert {(e.info["batch_id"], e.info["batch_groups"], e.info["batch_dropped"]) for e in stored} == {(0, 2, 2)}
    assert pipeline.write_step([], batch=1, dropped_groups=4) == []  # nothing to store: told with the next step
    stored = pipeline.write_step(make_group("c", 2), batch=2, dropped_groups=1)
    assert {(e.info["batch_id"], e.info["batch_groups"], e.info["batch_dropped"]) for e in stored} == {(2, 1, 5)}
    assert storage.get(6, timeout=1)[0].info["batch_dropped"] == 2  # the fields survive the storage


def test_a_batch_ends_with_the_complete_groups_of_a_step_instead_of_waiting(storage: SQLiteStorage) -> None:
    ExperiencePipeline(storage=storage).write_step(make_group("a", 2) + make_group("b", 2), batch=0,
                                                   dropped_groups=2)
    waiting = make_sample_strategy("default", storage, batch_size=4, group_size=2)
    with pytest.raises(StorageTimeoutError):  # without the count, the reader waits for groups that never come
        waiting.sample(0, timeout=0.3)
    storage.load_state_dict({"read_offset": 0})
    counting = make_sample_strategy("default", storage, batch_size=4, group_size=2)
    counting.count_dropped = True
    assert group_ids(counting.sample(0, timeout=0.3)) == ["a", "b"]
    assert counting.last_places == 4


def test_dropped_places_carry_over_checkpoints_and_a_batch_of_only_dropped_groups_is_skipped(
    storage: SQLiteStorage, tmp_path: Path
) -> None:
    pipeline = ExperiencePipeline(storage=storage)
    # step 0: three groups stored, five dropped; the batch of 2 groups takes a, b, then c and a dropped place
    pipeline.write_step(make_group("a", 2) + make_group("b", 2) + make_group("c", 2), batch=0, dropped_groups=5)
    pipeline.write_step(make_group("d", 2) + make_group("e", 2), batch=1, dropped_groups=0)
    strategy = make_sample_strategy("default", storage, batch_size=2, group_size=2)
    strategy.count_dropped = True
    assert group_ids(strategy.sample(0, timeout=1)) == ["a", "b"]
    assert group_ids(strategy.sample(0, timeout=1)) == ["c"] and strategy.last_places == 2
    state = strategy.state_dict()
    resumed = make_sample_strategy("default", SQLiteStorage(tmp_path / "buf.sqlite", poll_interval=0.01),
                                   batch_size=2, group_size=2)
    resumed.count_dropped = True
    resumed.load_state_dict(state)
    # four dropped places left: two batches skipped, then d and e
    assert group_ids(resumed.sample(0, timeout=1)) == ["d", "e"] and resumed.last_places == 6
    storage.close()
    with pytest.raises(BufferExhaustedError):
        resumed.sample(0, timeout=1)
