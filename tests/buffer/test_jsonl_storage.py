"""The append-only JSONL storage: durability, torn-line recovery, end marker, concurrent writers."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import ray
import torch

from tests.buffer.factories import ids, make_exp, make_group
from trinity.buffer import BufferExhaustedError, JsonlStorage, StorageClosedError, StorageError, StorageTimeoutError
from trinity.buffer.storage.jsonl import END_MARKER, read_all


def test_round_trip_one_line_per_experience(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "exp.jsonl"
    writer = JsonlStorage(path)
    writer.put(make_group("a", 2, version=4))
    writer.put([make_exp("b", 0, reward=None, note=1)])
    lines = path.read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[2])["info"] == {"note": 1}
    reader = JsonlStorage(path)  # another object (process) reads what was flushed
    got = reader.get(3)
    assert ids(got) == [("a", 0), ("a", 1), ("b", 0)]
    assert got[0].model_version == 4 and got[2].reward is None
    assert torch.equal(got[1].tokens, make_exp("a", 1).tokens)


def test_torn_last_line_is_ignored_by_readers_and_cut_by_the_next_writer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "exp.jsonl"
    JsonlStorage(path).put(make_group("a", 3))
    intact = path.read_bytes()
    with path.open("ab") as handle:  # a crash in the middle of the next write
        handle.write(b'{"tokens":[1,2,3],"prompt_len')
    reader = JsonlStorage(path, poll_interval=0.01)
    assert ids(reader.get(3)) == [("a", 0), ("a", 1), ("a", 2)]
    with caplog.at_level(logging.WARNING), pytest.raises(StorageTimeoutError):
        reader.get(1, timeout=0.05)
    assert f"{path}:4: ignoring a torn last line (29 bytes" in caplog.text
    assert path.read_bytes().startswith(intact)  # readers never modify the file
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        JsonlStorage(path).put([make_exp("b", 0)])  # the writer of the restarted run
    assert "cutting a torn last line (29 bytes" in caplog.text
    content = path.read_bytes()
    assert content.startswith(intact) and content.count(b"\n") == 4
    assert all(json.loads(line) for line in content.splitlines())
    assert ids(reader.get(1, timeout=1)) == [("b", 0)]  # the reader carries on where it was


def test_invalid_complete_line_is_skipped_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "exp.jsonl"
    storage = JsonlStorage(path)
    storage.put([make_exp("a", 0)])
    with path.open("ab") as handle:
        handle.write(b'{"not": "an experience"}\n')
    storage.put([make_exp("a", 1)])
    with caplog.at_level(logging.WARNING):
        assert ids(JsonlStorage(path).get(2)) == [("a", 0), ("a", 1)]
    assert f"{path}:2: skipping a line that is no valid experience" in caplog.text


def test_close_writes_an_end_marker_that_readers_honour(tmp_path: Path) -> None:
    path = tmp_path / "exp.jsonl"
    writer = JsonlStorage(path)
    writer.put(make_group("a", 3))
    writer.close()
    assert path.read_bytes().endswith(END_MARKER)
    with pytest.raises(StorageClosedError):
        writer.put([make_exp("b", 0)])
    reader = JsonlStorage(path)
    assert len(reader.get(10, timeout=5)) == 3
    with pytest.raises(BufferExhaustedError):
        reader.get(1, timeout=5)
    # a later run appends again: the marker in the middle no longer ends the data
    JsonlStorage(path).put([make_exp("c", 0)])
    assert ids(reader.get(1, timeout=1)) == [("c", 0)]
    assert len(read_all(path)) == 4


def test_state_dict_resumes_reading(tmp_path: Path) -> None:
    path = tmp_path / "exp.jsonl"
    storage = JsonlStorage(path)
    storage.put(make_group("a", 5))
    storage.get(2)
    state = storage.state_dict()
    assert state["line"] == 2
    resumed = JsonlStorage(path)
    resumed.load_state_dict(state)
    assert resumed.size() == 3
    assert ids(resumed.get(9, timeout=1, at_least=2)) == [("a", 2), ("a", 3), ("a", 4)]
    with pytest.raises(StorageError, match="not at a line start"):
        resumed.load_state_dict({"read_offset": state["read_offset"] - 1})
    with pytest.raises(StorageError, match="beyond the file"):
        resumed.load_state_dict({"read_offset": 10**9})


def test_truncate_cuts_the_lines_appended_after_a_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "exp.jsonl"
    storage = JsonlStorage(path)
    assert storage.end_position() == {"size": 0} and storage.truncate({"size": 0}) == 0
    storage.put(make_group("a", 2))
    written = storage.end_position()
    assert written == {"size": path.stat().st_size}
    storage.put(make_group("b", 3))
    assert storage.truncate(written) == 3
    assert ids(read_all(path)) == [("a", 0), ("a", 1)]
    storage.put(make_group("c", 1))
    assert ids(read_all(path)) == [("a", 0), ("a", 1), ("c", 0)]
    with pytest.raises(StorageError, match="not at a line start"):
        storage.truncate({"size": written["size"] - 1})
    with pytest.raises(StorageError, match="beyond the file"):
        storage.truncate({"size": 10**9})
    with pytest.raises(StorageError, match="no integer size"):
        storage.truncate({"last_id": 1})


def test_reading_a_missing_file_waits_then_times_out(tmp_path: Path) -> None:
    with pytest.raises(StorageTimeoutError, match=r"waited 0\.05 s for 1 experiences, 0 unread"):
        JsonlStorage(tmp_path / "none.jsonl", poll_interval=0.01).get(1, timeout=0.05)


@ray.remote(num_cpus=0)
def append_batches(storage: JsonlStorage, prefix: str, batches: int, size: int) -> None:
    for b in range(batches):
        storage.put(make_group(f"{prefix}-{b}", size, rewards=[0.5] * size))


@pytest.mark.usefixtures("ray_cluster")
def test_concurrent_writers_never_interleave_batches(tmp_path: Path) -> None:
    storage = JsonlStorage(tmp_path / "exp.jsonl")
    ray.get([append_batches.remote(storage, p, 20, 5) for p in ("w1", "w2")])
    got = storage.get(200, timeout=5)
    groups = [e.group_id for e in got]
    assert len(got) == 200 and len(set(groups)) == 40
    assert all(len(set(groups[i : i + 5])) == 1 for i in range(0, 200, 5))
