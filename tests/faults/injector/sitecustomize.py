"""Fault injection for the fault suite: a disk that fills up, read by every Python process of a run.

Python imports ``sitecustomize`` at start-up from the first folder on its path
that has one, so putting this folder first on a run's ``PYTHONPATH`` arms it in
the driver and in every Ray worker (they inherit the environment). Without its
environment variables it changes nothing.

``TRINITY_FAULT_DISK_FULL`` (JSON ``{"under": DIR, "trigger": TEXT, "after": BYTES}``):
    the filesystem under ``DIR`` fills up once a file whose path contains
    ``TEXT`` is opened for writing: from then on, writes of this process to
    files under ``DIR`` fail with a real ``OSError(ENOSPC)`` after ``BYTES``
    more bytes. The real ``open`` and ``write`` do the work; only the moment
    the space runs out is chosen. (A real small filesystem needs root; the
    suite uses one, a tmpfs, where it may mount it.)
``TRINITY_FAULT_SQLITE_FULL`` (JSON ``{"path": TEXT, "extra_pages": N}``):
    every SQLite connection to a database whose path contains ``TEXT`` gets
    SQLite's own ``max_page_count`` set to the database's size when connected
    plus ``N`` pages, so the real SQLite library reports ``database or disk is
    full`` (SQLITE_FULL) once a write needs more.
"""

from __future__ import annotations

import builtins
import errno
import io
import json
import os
from typing import Any


class _State:
    """How many bytes may still be written under the watched folder (None: the disk is not full yet)."""

    def __init__(self, under: str, trigger: str, after: int) -> None:
        self.under = os.path.abspath(under) + os.sep
        self.trigger = trigger
        self.after = after
        self.left: int | None = None

    def take(self, path: str, count: int) -> None:
        """Account for ``count`` bytes written to ``path``; raise ENOSPC when they do not fit."""
        if self.left is None:
            return
        if count > self.left:
            self.left = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        self.left -= count


class _FillingFile:
    """A real file object whose writes draw on the watched filesystem's remaining space."""

    def __init__(self, file: Any, path: str, state: _State) -> None:
        self._file = file
        self._path = path
        self._state = state

    def write(self, data: Any) -> int:
        self._state.take(self._path, len(data))
        return int(self._file.write(data))

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __enter__(self) -> _FillingFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()

    def __iter__(self) -> Any:
        return iter(self._file)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


def _arm_disk_full(spec: dict[str, Any]) -> None:
    state = _State(str(spec["under"]), str(spec["trigger"]), int(spec["after"]))
    real_open = io.open

    def filling_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        handle = real_open(file, mode, *args, **kwargs)
        if not isinstance(file, (str, bytes, os.PathLike)) or not any(m in mode for m in "wax+"):
            return handle
        path = os.path.abspath(os.fsdecode(file))
        if state.trigger in path and state.left is None:
            state.left = state.after
        if not path.startswith(state.under):
            return handle
        return _FillingFile(handle, path, state)

    builtins.open = filling_open
    io.open = filling_open


def _arm_sqlite_full(spec: dict[str, Any]) -> None:
    import sqlite3

    real_connect = sqlite3.connect
    fragment, extra = str(spec["path"]), int(spec["extra_pages"])

    def capped_connect(database: Any, *args: Any, **kwargs: Any) -> Any:
        connection = real_connect(database, *args, **kwargs)
        if fragment in os.fsdecode(database):
            pages = connection.execute("PRAGMA page_count").fetchone()[0]
            connection.execute(f"PRAGMA max_page_count = {int(pages) + extra}")
        return connection

    sqlite3.connect = capped_connect
    sqlite3.dbapi2.connect = capped_connect


if os.environ.get("TRINITY_FAULT_DISK_FULL"):
    _arm_disk_full(json.loads(os.environ["TRINITY_FAULT_DISK_FULL"]))
if os.environ.get("TRINITY_FAULT_SQLITE_FULL"):
    _arm_sqlite_full(json.loads(os.environ["TRINITY_FAULT_SQLITE_FULL"]))
