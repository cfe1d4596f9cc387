"""Experience storages: ``queue`` (Ray actor, default), ``sqlite`` (persistent) and ``jsonl`` (append-only file).

:func:`make_storage` builds the one a :class:`~trinity.common.config.plan.data.StoragePlan` names; a
``queue`` whose explorer and trainer share one process (mode ``both``) is a plain in-process queue.
"""

from __future__ import annotations

from pathlib import Path

from trinity.buffer.catalog import PRIORITY_FUNCTIONS
from trinity.buffer.storage.base import STORAGES, ExperienceStorage
from trinity.buffer.storage.jsonl import JsonlStorage
from trinity.buffer.storage.local_queue import LocalQueueStorage
from trinity.buffer.storage.ray_queue import QueueStorage
from trinity.buffer.storage.sqlite import SQLiteStorage
from trinity.common.config.plan.data import StoragePlan


def make_storage(config: StoragePlan, *, run_dir: str | Path = ".", in_process: bool = False) -> ExperienceStorage:
    """Return the storage ``config.kind`` names, built from ``config``.

    ``in_process``: every writer and reader lives in this process, so a
    ``queue`` is a :class:`LocalQueueStorage` (no Ray actor, no pickling).

    An empty ``config.path`` means ``<run_dir>/buffer/<name>.sqlite`` /
    ``.jsonl``; a relative one lives under ``run_dir``. Raises
    :class:`~trinity.utils.registry.UnknownNameError` for an unknown type and
    :class:`~trinity.buffer.errors.StorageError` when the storage cannot be opened.
    """
    if in_process and config.kind == LocalQueueStorage.storage_type:
        return LocalQueueStorage.from_config(config, name=config.name, run_dir=run_dir)
    return STORAGES.get(config.kind).from_config(config, name=config.name, run_dir=run_dir)


#: Upstream's name of the replay priority functions' registry (``PRIORITY_FUNC.register_module("name")``).
PRIORITY_FUNC = PRIORITY_FUNCTIONS


__all__ = [
    "PRIORITY_FUNC",
    "STORAGES",
    "ExperienceStorage",
    "JsonlStorage",
    "LocalQueueStorage",
    "QueueStorage",
    "SQLiteStorage",
    "make_storage",
]
