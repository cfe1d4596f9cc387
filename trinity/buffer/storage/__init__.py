"""Experience storages: ``queue`` (Ray actor, default), ``sqlite`` (persistent) and ``jsonl`` (append-only file).

:func:`make_storage` builds the one a :class:`~trinity.common.config.schema.StorageConfig` names.
"""

from __future__ import annotations

from pathlib import Path

from trinity.buffer.storage.base import STORAGES, ExperienceStorage
from trinity.buffer.storage.jsonl import JsonlStorage
from trinity.buffer.storage.ray_queue import QueueStorage
from trinity.buffer.storage.sqlite import SQLiteStorage
from trinity.common.config.schema import StorageConfig


def make_storage(config: StorageConfig, *, name: str = "experience", run_dir: str | Path = ".") -> ExperienceStorage:
    """Return the storage ``config.storage_type`` names, built from ``config``.

    A relative or empty ``config.path`` lives under ``run_dir`` (default file
    ``<run_dir>/buffer/<name>.sqlite`` / ``.jsonl``). Raises
    :class:`~trinity.common.registry.UnknownNameError` for an unknown type and
    :class:`~trinity.buffer.errors.StorageError` when the storage cannot be opened.
    """
    return STORAGES.get(config.storage_type).from_config(config, name=name, run_dir=run_dir)


__all__ = ["STORAGES", "ExperienceStorage", "JsonlStorage", "QueueStorage", "SQLiteStorage", "make_storage"]
