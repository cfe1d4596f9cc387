"""Mode both starting without a checkpoint empties the persistent buffer an earlier, killed run left behind.

A run killed before its first checkpoint leaves explored rows (some read,
some not) in the SQLite buffer; the next run explores from the first batch,
so those rows would be trained a second time beside the fresh ones.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tests.buffer.factories import make_group, storage_plan
from trinity.buffer import make_storage
from trinity.launcher.both_loop import BothLoop


def _loop_over(storage: object) -> BothLoop:
    """A loop with only the storages set: :meth:`BothLoop.start_afresh` touches nothing else."""
    loop = object.__new__(BothLoop)
    loop.storage = storage
    loop.pipeline = SimpleNamespace(recorder=None)
    return loop


def test_a_fresh_start_drops_the_rows_a_run_without_a_checkpoint_left(tmp_path: Path) -> None:
    killed = make_storage(storage_plan(name="experience", storage_type="sql"), run_dir=tmp_path)
    killed.put(make_group("t0", 4) + make_group("t1", 4))  # the killed run's first batch, trained
    killed.get(8)
    killed.put(make_group("t2", 4) + make_group("t3", 4))  # its second batch, explored ahead, never trained
    killed.close()
    storage = make_storage(storage_plan(name="experience", storage_type="sql"), run_dir=tmp_path)  # the rerun's
    assert storage.total() == 16

    assert _loop_over(storage).start_afresh() == 16
    assert storage.total() == 0 and storage.size() == 0
    storage.put(make_group("t0", 4))  # the new run's first batch is the only one there, and the buffer is open
    assert [e.group_id for e in storage.get(4)] == ["t0"] * 4


def test_a_fresh_start_on_an_empty_buffer_cuts_nothing(tmp_path: Path) -> None:
    storage = make_storage(storage_plan(name="experience", storage_type="sql"), run_dir=tmp_path)
    assert _loop_over(storage).start_afresh() == 0
