"""The SQLite storage on real files: persistence, restarts, atomic writes, concurrent Ray workers."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest
import ray
import torch

from tests.buffer.factories import ids, make_exp, make_group, storage_plan
from trinity.buffer import (
    BufferExhaustedError,
    SQLiteStorage,
    StorageClosedError,
    StorageError,
    StorageTimeoutError,
    make_storage,
)
from trinity.buffer.storage import sqlite as sqlite_module


def test_round_trip_and_indexed_columns(tmp_path: Path) -> None:
    storage = SQLiteStorage(tmp_path / "buf.sqlite")
    storage.put([make_exp("a", 0, reward=0.25, version=2, tag="t"), make_exp("a", 1, version=2)])
    got = storage.get(2)
    assert ids(got) == [("a", 0), ("a", 1)]
    expected = make_exp("a", 0, reward=0.25, version=2, tag="t")
    assert torch.equal(got[0].tokens, expected.tokens) and torch.equal(got[0].logprobs, expected.logprobs)
    assert (got[0].reward, got[0].model_version, got[0].info) == (0.25, 2, {"tag": "t"})
    with sqlite3.connect(tmp_path / "buf.sqlite") as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        rows = raw.execute("SELECT group_id, run_id, model_version, reward, consumed FROM experiences").fetchall()
        indexes = {r[1] for r in raw.execute("PRAGMA index_list('experiences')")}
    assert rows == [("a", 0, 2, 0.25, 1), ("a", 1, 2, 1.0, 1)]
    assert {"ix_experiences_group_id", "ix_experiences_model_version", "ix_experiences_consumed_id"} <= indexes


def test_a_new_object_continues_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "buf.sqlite"
    first = SQLiteStorage(path)
    first.put(make_group("a", 4))
    first.put(make_group("b", 4))
    assert ids(first.get(3)) == [("a", 0), ("a", 1), ("a", 2)]
    first.release()  # the process "dies"
    second = SQLiteStorage(path)
    assert second.size() == 5 and second.total() == 8
    assert second.state_dict() == {"read_offset": 3}
    assert ids(second.get(2)) == [("a", 3), ("b", 0)]
    assert ids(second.get(10, timeout=1, at_least=1)) == [("b", i) for i in range(1, 4)]


def test_load_state_dict_rewinds_to_a_checkpoint(tmp_path: Path) -> None:
    storage = SQLiteStorage(tmp_path / "buf.sqlite")
    storage.put(make_group("a", 6))
    storage.get(2)
    checkpoint = storage.state_dict()
    storage.get(3)  # read after the checkpoint, then the trainer crashed
    resumed = SQLiteStorage(tmp_path / "buf.sqlite")
    resumed.load_state_dict(checkpoint)
    assert ids(resumed.get(4)) == [("a", i) for i in range(2, 6)]
    with pytest.raises(StorageError, match=r"outside the stored rows 0\.\.6"):
        resumed.load_state_dict({"read_offset": 7})
    with pytest.raises(StorageError, match="no integer read_offset"):
        resumed.load_state_dict({})


def test_truncate_drops_the_rows_written_after_a_checkpoint(tmp_path: Path) -> None:
    storage = SQLiteStorage(tmp_path / "buf.sqlite")
    assert storage.end_position() == {"last_id": 0}
    storage.put(make_group("a", 2))
    storage.get(1)
    read, written = storage.state_dict(), storage.end_position()
    assert written == {"last_id": 2}
    storage.put(make_group("b", 3))  # stored after the checkpoint; the explorer was done and closed the storage
    storage.close()
    storage.release()
    resumed = SQLiteStorage(tmp_path / "buf.sqlite")
    assert resumed.truncate(written) == 3
    resumed.load_state_dict(read)
    assert resumed.total() == 2 and ids(resumed.get(1)) == [("a", 1)]
    with pytest.raises(StorageTimeoutError):  # reopened: a reader waits for the batches explored again
        resumed.get(1, timeout=0.1)
    resumed.put(make_group("c", 1))  # ids go on after the highest ever used: the read position stays a prefix
    assert resumed.end_position() == {"last_id": 6} and ids(resumed.get(1)) == [("c", 0)]
    with pytest.raises(StorageError, match=r"last_id 9 is outside the stored rows 0\.\.6"):
        resumed.truncate({"last_id": 9})
    with pytest.raises(StorageError, match="no integer last_id"):
        resumed.truncate({"size": 3})


def test_get_timeout_close_and_exhaustion(tmp_path: Path) -> None:
    storage = SQLiteStorage(tmp_path / "buf.sqlite", poll_interval=0.01)
    storage.put([make_exp("a", 0)])
    with pytest.raises(StorageTimeoutError, match=r"waited 0\.1 s for 2 experiences, 1 unread"):
        storage.get(2, timeout=0.1)
    storage.close()
    with pytest.raises(StorageClosedError):
        storage.put([make_exp("b", 0)])
    reader = SQLiteStorage(tmp_path / "buf.sqlite")  # another process sees the close
    assert ids(reader.get(2, timeout=1)) == [("a", 0)]
    with pytest.raises(BufferExhaustedError):
        reader.get(1, timeout=1)
    # a writer of a later run re-opens the storage
    SQLiteStorage(tmp_path / "buf.sqlite").put([make_exp("c", 0)])
    assert ids(reader.get(1, timeout=0)) == [("c", 0)]


def test_a_failed_write_stores_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = SQLiteStorage(tmp_path / "buf.sqlite")
    storage.put([make_exp("ok", 0)])
    real = sqlite_module.dump_experience
    calls = iter(range(100))
    # the third row of the batch violates NOT NULL: the insert fails after two rows went in
    monkeypatch.setattr(sqlite_module, "dump_experience", lambda e: None if next(calls) == 2 else real(e))
    with pytest.raises(StorageError, match="write failed") as exc:
        storage.put(make_group("bad", 4))
    assert "\n" not in str(exc.value)
    assert storage.total() == 1


def test_unusable_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"definitely not a database" * 100)
    with pytest.raises(StorageError) as exc:
        SQLiteStorage(path)
    assert str(exc.value).startswith(f"sqlite storage: {path} is not a usable SQLite database")
    assert "\n" not in str(exc.value)


def test_make_storage_puts_the_file_under_the_run_folder(tmp_path: Path) -> None:
    storage = make_storage(storage_plan(name="exp", storage_type="sql"), run_dir=tmp_path)
    assert isinstance(storage, SQLiteStorage)
    assert storage.path == tmp_path / "buffer" / "exp.sqlite" and storage.path.exists()
    # a relative path in a StoragePlan lives under the run folder (the config resolves sqlite URLs to absolute files)
    relative = make_storage(dataclasses.replace(storage_plan(storage_type="sql"), path="x/b.db"), run_dir=tmp_path)
    assert isinstance(relative, SQLiteStorage) and relative.path == tmp_path / "x" / "b.db"
    url = make_storage(storage_plan(storage_type="sql", path=f"sqlite:///{tmp_path / 'c.db'}"), run_dir=tmp_path / "r")
    assert isinstance(url, SQLiteStorage) and url.path == tmp_path / "c.db"


@ray.remote(num_cpus=0)
def write_batches(storage: SQLiteStorage, prefix: str, batches: int, size: int) -> int:
    for b in range(batches):
        storage.put(make_group(f"{prefix}-{b}", size))
    return batches * size


@ray.remote(num_cpus=0)
def read_all(storage: SQLiteStorage, n: int) -> list[tuple[str, int]]:
    got: list[tuple[str, int]] = []
    while True:
        try:
            got.extend(ids(storage.get(n, timeout=30)))
        except BufferExhaustedError:
            return got


@pytest.mark.usefixtures("ray_cluster")
def test_ray_workers_write_and_read_concurrently(tmp_path: Path) -> None:
    storage = SQLiteStorage(tmp_path / "shared.sqlite", poll_interval=0.01)
    writers = [write_batches.remote(storage, p, 15, 4) for p in ("w1", "w2")]
    reader = read_all.remote(storage, 3)
    here: list[tuple[str, int]] = []
    pending = list(writers)
    while pending:  # the driver process reads alongside the reader worker while the writers write
        _, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
        try:
            here.extend(ids(storage.get(5, timeout=0.2)))
        except StorageTimeoutError:
            pass
    assert ray.get(writers) == [60, 60]
    storage.close()
    while True:
        try:
            here.extend(ids(storage.get(5, timeout=5)))
        except BufferExhaustedError:
            break
    everything = here + ray.get(reader)
    expected = {(f"{p}-{b}", r) for p in ("w1", "w2") for b in range(15) for r in range(4)}
    assert len(everything) == 120 and set(everything) == expected  # each row read exactly once
    # every batch was written atomically: in id order its 4 rows are adjacent
    with sqlite3.connect(tmp_path / "shared.sqlite") as raw:
        order = [g for (g,) in raw.execute("SELECT group_id FROM experiences ORDER BY id")]
    assert all(len(set(order[i : i + 4])) == 1 for i in range(0, 120, 4))
    assert SQLiteStorage(tmp_path / "shared.sqlite").size() == 0


def _fill_limit(storage: SQLiteStorage) -> None:
    """Cap the database at its current size with SQLite's own page limit: the next growth fails SQLITE_FULL."""
    from sqlalchemy import event

    def cap(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        pages = dbapi_connection.execute("PRAGMA page_count").fetchone()[0]
        dbapi_connection.execute(f"PRAGMA max_page_count = {pages}")

    storage.engine.dispose()
    event.listen(storage.engine, "connect", cap)


def test_a_full_database_is_the_no_space_line_with_exit_2(tmp_path: Path) -> None:
    storage = SQLiteStorage(tmp_path / "buf.sqlite")
    storage.put(make_group("a", 2))
    _fill_limit(storage)
    with pytest.raises(StorageError) as caught:
        storage.put(make_group("b", 64))
    message = str(caught.value)
    assert caught.value.exit_code == 2
    assert "No space left on device (errno ENOSPC)" in message and str(tmp_path / "buf.sqlite") in message
    assert "busy timeout" not in message and "\n" not in message
    assert storage.size() == 2, "the failed write left nothing behind"


def test_a_writers_mark_is_stored_in_the_same_transaction_as_its_experiences(tmp_path: Path) -> None:
    path = tmp_path / "buf.sqlite"
    storage = SQLiteStorage(path)
    assert storage.read_mark("explorer") is None
    assert storage.put_marked(make_group("a", 2), "explorer", "step 1") is True
    assert storage.put_marked([], "explorer", "step 2") is True  # a step that stored nothing still moves the mark
    assert SQLiteStorage(path).read_mark("explorer") == "step 2"  # another object (a later job) reads it
    with sqlite3.connect(path) as raw:  # the mark's insert fails after the rows' insert, in the same write
        raw.execute("CREATE TRIGGER refuse BEFORE INSERT ON buffer_state WHEN NEW.value = 'step 3' "
                    "BEGIN SELECT RAISE(ABORT, 'refused'); END")
    with pytest.raises(StorageError, match="refused"):
        storage.put_marked(make_group("b", 2), "explorer", "step 3")
    assert storage.total() == 2 and storage.read_mark("explorer") == "step 2", "neither the rows nor the mark"


def test_a_storage_without_marks_stores_the_experiences_and_says_the_mark_was_not_kept(tmp_path: Path) -> None:
    storage = make_storage(storage_plan(name="experience", storage_type="file", path=str(tmp_path / "buf.jsonl")),
                           run_dir=tmp_path)
    assert storage.put_marked(make_group("a", 2), "explorer", "step 1") is False
    assert storage.read_mark("explorer") is None and storage.size() == 2
