"""``jsonl``: an append-only file of experiences, one JSON object per line.

Writers append each batch with one ``write`` under an exclusive ``flock`` and
``fsync`` it, so batches from several processes never interleave and a batch
is on disk when ``put`` returns. ``close`` appends an end marker line.

A crash mid-write can leave a *torn* last line (bytes without the final
newline). Readers never consume an unterminated line; they log a warning and
ignore it when it is still there at the end of the data. The next writer cuts
it off (with a warning) before appending, so earlier lines are never touched
and new lines never glue onto the fragment. A complete line that is not a
valid experience is skipped with a warning naming ``file:line``.

Each storage object reads the whole file from its own position (in memory;
``state_dict`` saves it in a checkpoint). ``end_position`` is the file's
size; ``truncate`` cuts the lines appended after it.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trinity.buffer.errors import BufferExhaustedError, StorageClosedError, StorageError, StorageTimeoutError
from trinity.buffer.storage.base import (
    STORAGES,
    Deadline,
    ExperienceStorage,
    check_count,
    dump_experience,
    load_experience,
    resolve_path,
    seconds,
)
from trinity.common.config.plan.data import StoragePlan
from trinity.common.experience import Experience
from trinity.utils.fs import fsync_dir as _fsync_dir

logger = logging.getLogger(__name__)

#: The line ``close`` appends; a reader that reaches it as the last line knows the writers are done.
END_MARKER = b'{"__trinity_buffer__":"closed"}\n'


@STORAGES.register("jsonl")
class JsonlStorage(ExperienceStorage):
    """Experiences in an append-only JSONL file; see the module docstring."""

    storage_type = "jsonl"

    def __init__(self, path: str | Path, name: str = "experience", *, poll_interval: float = 0.05) -> None:
        """Use the file at ``path`` (created on the first write)."""
        super().__init__(name)
        self.path = Path(path)
        self.poll_interval = poll_interval
        self._offset = 0  # byte offset of the next unread line
        self._line = 0  # lines read so far (for file:line messages)
        self._closed_here = False
        self._warned_torn_at = -1
        self._warned_lines: set[int] = set()

    @classmethod
    def from_config(cls, config: StoragePlan, *, name: str, run_dir: str | Path) -> JsonlStorage:
        """Return the storage at ``config.path`` (default ``<run_dir>/buffer/<name>.jsonl``)."""
        return cls(resolve_path(config.path, run_dir, name, ".jsonl"), name)

    def describe(self) -> str:
        """Return the storage's name and file for messages."""
        return f"jsonl storage {self.name!r} ({self.path})"

    # writing

    def _append(self, payload: bytes) -> None:
        """Append ``payload`` under an exclusive lock, cutting a torn last line first, and fsync."""
        try:
            created = not self.path.exists()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a+b") as handle:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
                try:
                    self._cut_torn_tail(handle)
                    handle.write(payload)
                    handle.flush()
                    os.fsync(handle.fileno())
                finally:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
            if created:
                _fsync_dir(self.path.parent)
        except OSError as exc:
            raise StorageError(f"{self.describe()}: write failed ({exc.strerror or exc})") from None

    def _cut_torn_tail(self, handle: Any) -> None:
        """Truncate the file after its last newline when it does not end with one (a crashed write)."""
        end = handle.seek(0, os.SEEK_END)
        if end == 0:
            return
        handle.seek(end - 1)
        if handle.read(1) == b"\n":
            return
        keep = end
        chunk = 1 << 16
        while keep > 0:  # find the last newline, scanning backwards
            start = max(0, keep - chunk)
            handle.seek(start)
            data = handle.read(keep - start)
            cut = data.rfind(b"\n")
            if cut >= 0:
                keep = start + cut + 1
                break
            keep = start
        logger.warning("%s: cutting a torn last line (%d bytes without newline, from a crashed write)",
                       self.describe(), end - keep)
        handle.truncate(keep)
        handle.flush()
        os.fsync(handle.fileno())

    def put(self, experiences: Sequence[Experience], timeout: float | None = None) -> None:
        """Append ``experiences`` in one locked, fsynced write; see the base class (``timeout`` is not used)."""
        if self._closed_here:
            raise StorageClosedError(f"{self.describe()} is closed for writing; {len(experiences)} experiences refused")
        if experiences:
            self._append(b"".join(dump_experience(e).encode("utf-8") + b"\n" for e in experiences))

    def close(self) -> None:
        """Append the end marker; this object stops writing."""
        self._closed_here = True
        self._append(END_MARKER)

    # reading

    def _scan(self, n: int) -> tuple[list[Experience], int, int, bool, int]:
        """Read up to ``n`` experiences from the current position without moving it.

        Returns ``(experiences, new offset, new line count, closed, torn bytes)``:
        ``closed`` when the end marker is the last complete line, ``torn`` the
        length of an unterminated tail (0 if none) when the end was reached.
        """
        found: list[Experience] = []
        offset, line = self._offset, self._line
        try:
            with self.path.open("rb") as handle:
                handle.seek(offset)
                while len(found) < n:
                    raw = handle.readline()
                    if not raw.endswith(b"\n"):
                        return found, offset, line, False, len(raw)  # end of data, maybe a torn line
                    if raw == END_MARKER and handle.tell() >= os.fstat(handle.fileno()).st_size:
                        # the writers are done: stay before the marker, so the next read sees it again
                        return found, offset, line, True, 0
                    line += 1
                    offset += len(raw)
                    if raw == END_MARKER or not raw.strip():
                        continue  # a marker followed by more lines: a later run appended again
                    try:
                        found.append(load_experience(raw))
                    except (ValueError, TypeError) as exc:
                        if line not in self._warned_lines:
                            self._warned_lines.add(line)
                            logger.warning("%s:%d: skipping a line that is no valid experience (%s)",
                                           self.path, line, exc)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageError(f"{self.describe()}: read failed ({exc.strerror or exc})") from None
        return found, offset, line, False, 0

    def get(self, n: int, timeout: float | None = None, *, at_least: int | None = None) -> list[Experience]:
        """Return the next ``n`` experiences of the file; see the base class."""
        need = check_count(n, at_least)
        deadline = Deadline(timeout)
        while True:
            found, offset, line, closed, torn = self._scan(n)
            if len(found) >= need or (closed and found):
                self._offset, self._line = offset, line
                return found
            if closed or deadline.expired():
                self._warn_torn(torn, line + 1)
                if closed:
                    self._offset, self._line = offset, line
                    raise BufferExhaustedError(f"{self.describe()} is closed and every experience has been read")
                raise StorageTimeoutError(
                    f"{self.describe()}: waited {seconds(timeout)} for {need} experiences, {len(found)} unread; "
                    "is the explorer running?"
                )
            deadline.sleep(self.poll_interval)

    def _warn_torn(self, torn: int, line: int) -> None:
        if torn and self._warned_torn_at != line:
            self._warned_torn_at = line
            logger.warning("%s:%d: ignoring a torn last line (%d bytes without newline, from a crashed write)",
                           self.path, line, torn)

    def size(self) -> int:
        """Return the number of complete experience lines after the read position."""
        found, *_ = self._scan(1 << 62)
        return len(found)

    def state_dict(self) -> dict[str, Any]:
        """Return ``{"read_offset": bytes read, "line": lines read}``."""
        return {"read_offset": self._offset, "line": self._line}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue reading from a saved :meth:`state_dict`; raises StorageError if it does not fit the file."""
        try:
            offset, line = int(state["read_offset"]), int(state.get("line", 0))
        except (KeyError, TypeError, ValueError):
            raise StorageError(f"{self.describe()}: saved state {state!r} has no integer read_offset") from None
        size = self.path.stat().st_size if self.path.exists() else 0
        if not 0 <= offset <= size:
            raise StorageError(f"{self.describe()}: saved read_offset {offset} is beyond the file's {size} bytes")
        if offset:
            with self.path.open("rb") as handle:
                handle.seek(offset - 1)
                if handle.read(1) != b"\n":
                    raise StorageError(f"{self.describe()}: saved read_offset {offset} is not at a line start")
        self._offset, self._line = offset, line

    def end_position(self) -> dict[str, Any]:
        """Return ``{"size": bytes in the file}`` (0 before the first write)."""
        return {"size": self.path.stat().st_size if self.path.exists() else 0}

    def truncate(self, position: dict[str, Any]) -> int:
        """Cut the file back to ``position["size"]`` bytes under the writers' lock; return the lines cut.

        Raises StorageError when the position is malformed, beyond the file or not at a line start.
        """
        try:
            keep = int(position["size"])
        except (KeyError, TypeError, ValueError):
            raise StorageError(f"{self.describe()}: saved end position {position!r} has no integer size") from None
        if not self.path.exists():
            if keep:
                raise StorageError(f"{self.describe()}: saved size {keep} but the file is gone; was it deleted?")
            return 0
        try:
            with self.path.open("r+b") as handle:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
                try:
                    size = handle.seek(0, os.SEEK_END)
                    if not 0 <= keep <= size:
                        raise StorageError(f"{self.describe()}: saved size {keep} is beyond the file's {size} bytes; "
                                           "was the file replaced?")
                    if keep:
                        handle.seek(keep - 1)
                        if handle.read(1) != b"\n":
                            raise StorageError(f"{self.describe()}: saved size {keep} is not at a line start")
                    handle.seek(keep)
                    cut = handle.read().count(b"\n")
                    handle.truncate(keep)
                    handle.flush()
                    os.fsync(handle.fileno())
                finally:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        except OSError as exc:
            raise StorageError(f"{self.describe()}: truncate failed ({exc.strerror or exc})") from None
        return int(cut)


def read_all(path: str | Path) -> list[Experience]:
    """Return every experience of a JSONL experience file (torn and invalid lines skipped with a warning)."""
    storage = JsonlStorage(path)
    found, *_ = storage._scan(1 << 62)
    return found
