"""The queue storages: the Ray actor queue on a real local Ray cluster, and the in-process queue of mode both.

Both follow the same rules; each behaviour test runs on both.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
import torch

from tests.buffer.factories import ids, make_exp, make_group, storage_plan
from trinity.buffer import (
    BufferExhaustedError,
    LocalQueueStorage,
    QueueStorage,
    StorageClosedError,
    StorageError,
    StorageTimeoutError,
    make_sample_strategy,
    make_storage,
)
from trinity.buffer.storage.base import ExperienceStorage

pytestmark = pytest.mark.usefixtures("ray_cluster")


@pytest.fixture(params=["ray", "in-process"])
def queue(request: pytest.FixtureRequest) -> Iterator[QueueStorage]:
    name = f"q-{uuid.uuid4().hex[:8]}"
    storage = QueueStorage(name, capacity=6) if request.param == "ray" else LocalQueueStorage(name, capacity=6)
    yield storage  # type: ignore[misc]
    storage.release()


@pytest.fixture
def ray_queue() -> Iterator[QueueStorage]:
    storage = QueueStorage(f"q-{uuid.uuid4().hex[:8]}", capacity=6)
    yield storage
    storage.release()


def test_fifo_round_trip_keeps_every_field(queue: QueueStorage) -> None:
    first = make_exp("a", 0, reward=0.5, version=3, note="x")
    queue.put([first, make_exp("a", 1)])
    queue.put([make_exp("b", 0)])
    assert queue.size() == 3
    got = queue.get(2)
    assert ids(got) == [("a", 0), ("a", 1)]
    assert torch.equal(got[0].tokens, first.tokens) and torch.equal(got[0].logprobs, first.logprobs)
    assert (got[0].reward, got[0].model_version, got[0].info) == (0.5, 3, {"note": "x"})
    assert ids(queue.get(1)) == [("b", 0)]
    queue.put(make_group("c", 2))
    assert ids(queue.get(5, timeout=1, at_least=1)) == [("c", 0), ("c", 1)]  # what is there, up to 5


def test_get_times_out_with_a_clear_error(queue: QueueStorage) -> None:
    queue.put([make_exp("a", 0)])
    start = time.monotonic()
    with pytest.raises(StorageTimeoutError) as exc:
        queue.get(2, timeout=0.3)
    assert time.monotonic() - start >= 0.25
    message = str(exc.value)
    assert "waited 0.3 s for 2 experiences, 1 queued" in message and queue.name in message
    assert queue.size() == 1  # nothing taken by the failed get


def test_get_waits_for_a_writer(queue: QueueStorage) -> None:
    timer = threading.Timer(0.3, lambda: queue.put(make_group("late", 2)))
    timer.start()
    got = queue.get(2, timeout=10)
    timer.join()
    assert ids(got) == [("late", 0), ("late", 1)]


def test_capacity_pushes_back_on_writers(queue: QueueStorage) -> None:
    queue.put(make_group("a", 4))
    with pytest.raises(StorageTimeoutError, match=r"stayed full for 0.2 s \(capacity 6, 4 queued, 4 to add\)"):
        queue.put(make_group("b", 4), timeout=0.2)
    assert queue.size() == 4  # the refused batch left nothing behind
    done = threading.Event()

    def blocked_writer() -> None:
        queue.put(make_group("c", 4), timeout=10)
        done.set()

    writer = threading.Thread(target=blocked_writer)
    writer.start()
    time.sleep(0.3)
    assert not done.is_set()  # still waiting for room
    assert ids(queue.get(4)) == [("a", i) for i in range(4)]
    writer.join(timeout=10)
    assert done.is_set()
    assert ids(queue.get(4)) == [("c", i) for i in range(4)]


def test_a_batch_larger_than_capacity_enters_an_empty_queue(queue: QueueStorage) -> None:
    queue.put(make_group("big", 9))
    assert queue.size() == 9


def test_close_drains_then_reports_exhaustion(queue: QueueStorage) -> None:
    queue.put(make_group("a", 3))
    queue.close()
    with pytest.raises(StorageClosedError, match="closed for writing"):
        queue.put([make_exp("b", 0)])
    assert len(queue.get(5, timeout=1)) == 3  # the rest, fewer than asked
    with pytest.raises(BufferExhaustedError):
        queue.get(1, timeout=1)


def test_close_wakes_a_waiting_reader(queue: QueueStorage) -> None:
    threading.Timer(0.3, queue.close).start()
    with pytest.raises(BufferExhaustedError):
        queue.get(1, timeout=10)


@ray.remote(num_cpus=0)
def remote_writer(storage: ExperienceStorage, group: str, size: int) -> int:
    storage.put(make_group(group, size))
    return storage.size()


def test_storage_object_travels_to_other_ray_workers(ray_queue: QueueStorage) -> None:
    ray.get([remote_writer.remote(ray_queue, "w1", 2), remote_writer.remote(ray_queue, "w2", 2)])
    got = ray_queue.get(4, timeout=10)
    assert sorted(ids(got)) == [("w1", 0), ("w1", 1), ("w2", 0), ("w2", 1)]
    # each put is atomic: the two members of each group are adjacent
    assert got[0].group_id == got[1].group_id and got[2].group_id == got[3].group_id


def test_same_name_attaches_to_the_same_queue(ray_queue: QueueStorage) -> None:
    other = QueueStorage(ray_queue.name)
    other.put([make_exp("shared", 0)])
    assert ids(ray_queue.get(1, timeout=5)) == [("shared", 0)]


def test_the_in_process_queue_hands_over_the_objects_and_refuses_to_leave_its_process(tmp_path: Path) -> None:
    storage = make_storage(storage_plan(name="local", storage_type="queue", capacity=2), in_process=True)
    assert isinstance(storage, LocalQueueStorage) and storage.capacity == 2
    group = make_group("a", 2)
    storage.put(group)
    assert all(got is sent for got, sent in zip(storage.get(2), group, strict=True))  # no copy on the way
    with pytest.raises(TypeError, match="lives in the process that made it"):
        ray.put(storage)
    with pytest.raises(StorageError, match="capacity must be 0"):
        LocalQueueStorage("bad", capacity=-1)
    # any other storage type is what it is in any process
    sql = make_storage(storage_plan(name="s", storage_type="sql"), run_dir=tmp_path, in_process=True)
    try:
        assert sql.storage_type == "sqlite"
    finally:
        sql.release()


def test_make_storage_builds_a_queue_and_rejects_bad_capacity() -> None:
    storage = make_storage(storage_plan(name=f"q-{uuid.uuid4().hex[:8]}", storage_type="queue", capacity=2))
    try:
        assert isinstance(storage, QueueStorage) and storage.capacity == 2
    finally:
        storage.release()
    with pytest.raises(StorageError, match="capacity must be 0"):
        QueueStorage("bad", capacity=-1)


def test_default_strategy_over_the_queue(queue: QueueStorage) -> None:
    queue.put(make_group("a", 3)[:2])
    queue.put([make_exp("solo", 0, group_size=1)])
    queue.put(make_group("a", 3)[2:])
    strategy = make_sample_strategy("default", queue, batch_size=2, group_size=3)
    assert ids(strategy.sample(0, timeout=5)) == [("solo", 0), ("a", 0), ("a", 1), ("a", 2)]
