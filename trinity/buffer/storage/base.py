"""The experience storage interface and its registry, :data:`STORAGES`.

Explorers ``put`` lists of experiences; the trainer (through a sample
strategy) ``get`` s them in arrival order. Every storage follows the same
rules:

* ``put(experiences)`` is atomic: the list is stored whole and contiguous, so
  a group written in one call is read back in one run.
* ``get(n, timeout)`` returns exactly ``n`` experiences (``at_least=k``:
  between ``k`` and ``n``, as many as there are), waiting up to
  ``timeout`` seconds (None: forever) and raising
  :class:`~trinity.buffer.errors.StorageTimeoutError` when they do not come.
  After ``close()`` it returns what is left (possibly fewer than ``n``), then
  raises :class:`~trinity.buffer.errors.BufferExhaustedError`.
* ``state_dict()`` / ``load_state_dict()`` carry the read position through a
  checkpoint where the storage is persistent (SQLite, JSONL);
  ``end_position()`` / ``truncate()`` do the same for the write end, so a
  run resumed from a checkpoint can drop what was written after it.
* A storage object can be pickled into another Ray actor (or process) and
  used there.
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trinity.common.config.plan.data import StoragePlan
from trinity.common.experience import Experience
from trinity.utils.registry import Registry


class ExperienceStorage(ABC):
    """Where experiences wait between the explorer and the trainer (see the module docstring)."""

    #: Registry name of the storage type (``queue``, ``sqlite``, ``jsonl``).
    storage_type: str = ""

    def __init__(self, name: str) -> None:
        #: Name of this buffer (``experience``), used in messages and actor/file names.
        self.name = name

    @classmethod
    @abstractmethod
    def from_config(cls, config: StoragePlan, *, name: str, run_dir: str | Path) -> ExperienceStorage:
        """Return the storage ``config`` describes; a relative or empty path lives under ``run_dir``."""

    @abstractmethod
    def put(self, experiences: Sequence[Experience], timeout: float | None = None) -> None:
        """Store ``experiences`` atomically, waiting up to ``timeout`` seconds for room.

        Raises StorageTimeoutError when there is no room in time and
        StorageClosedError after :meth:`close`.
        """

    @abstractmethod
    def get(self, n: int, timeout: float | None = None, *, at_least: int | None = None) -> list[Experience]:
        """Return the next ``n`` experiences in arrival order (fewer only at the end of a closed storage).

        With ``at_least`` (1..n), return as soon as that many are there, up to
        ``n``. Raises StorageTimeoutError when they do not arrive within
        ``timeout`` seconds and BufferExhaustedError when the storage is closed
        and empty.
        """

    @abstractmethod
    def close(self) -> None:
        """Declare that no more experiences will be written; readers drain what is left."""

    @abstractmethod
    def size(self) -> int:
        """Return the number of stored experiences not read yet."""

    def put_marked(
        self, experiences: Sequence[Experience], key: str, mark: str, timeout: float | None = None
    ) -> bool:
        """Store ``experiences`` and a writer's ``mark`` under ``key``; return True when both were one atomic write.

        A writer that must know, after being killed, whether its last write
        landed (mode explore's task position) reads the mark back with
        :meth:`read_mark`. By default the experiences are stored as
        :meth:`put` stores them and the mark is not (False): the writer keeps
        its own record.
        """
        if experiences:
            self.put(experiences, timeout=timeout)
        return False

    def read_mark(self, key: str) -> str | None:
        """Return the mark last stored under ``key`` by :meth:`put_marked`, or None."""
        return None

    def state_dict(self) -> dict[str, Any]:
        """Return the read position to save in a checkpoint (empty when the storage is not persistent)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a read position saved by :meth:`state_dict` (nothing to do by default)."""
        return None

    def end_position(self) -> dict[str, Any]:
        """Return where the stored data ends, to save in a checkpoint (empty when the storage is not persistent)."""
        return {}

    def truncate(self, position: dict[str, Any]) -> int:
        """Drop every experience stored after ``position`` (from :meth:`end_position`); return how many.

        Nothing to do by default. A persistent storage raises StorageError when
        ``position`` lies beyond what it holds.
        """
        return 0

    def release(self) -> None:
        """Free what this object holds (actor, connections); the stored data of a persistent storage stays."""
        return None

    def describe(self) -> str:
        """Return ``"<type> storage '<name>'"`` for messages."""
        return f"{self.storage_type} storage {self.name!r}"


#: Experience storage classes, by ``storage_type``.
STORAGES: Registry[type[ExperienceStorage]] = Registry("experience storage")


def resolve_path(path: str, run_dir: str | Path, name: str, suffix: str) -> Path:
    """Return the file of a storage: ``path`` (relative to ``run_dir``) or ``<run_dir>/buffer/<name><suffix>``."""
    if not path:
        return Path(run_dir) / "buffer" / f"{name}{suffix}"
    file = Path(path).expanduser()
    return file if file.is_absolute() else Path(run_dir) / file


def dump_experience(experience: Experience) -> str:
    """Return one line of compact JSON for ``experience`` (no newline)."""
    return json.dumps(experience.to_dict(), separators=(",", ":"))


def load_experience(text: str | bytes) -> Experience:
    """Rebuild an experience from :func:`dump_experience` output; raises ValueError (or TypeError) when invalid."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    return Experience.from_dict(data)


class Deadline:
    """A point in time ``timeout`` seconds from now (None: never), for polling loops."""

    def __init__(self, timeout: float | None) -> None:
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout must not be negative, got {timeout}")
        self.timeout = timeout
        self._end = None if timeout is None else time.monotonic() + timeout

    def remaining(self) -> float | None:
        """Seconds left (never negative), or None without a deadline."""
        return None if self._end is None else max(0.0, self._end - time.monotonic())

    def expired(self) -> bool:
        """Whether the deadline has passed."""
        return self._end is not None and time.monotonic() >= self._end

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` or until the deadline, whichever is sooner."""
        left = self.remaining()
        time.sleep(seconds if left is None else min(seconds, left))


def check_count(n: int, at_least: int | None = None) -> int:
    """Return how many experiences a ``get(n, at_least=...)`` waits for; raises ValueError unless 1 <= at_least <= n."""
    need = n if at_least is None else at_least
    if not 1 <= need <= n:
        raise ValueError(f"get needs 1 <= at_least <= n, got n={n}, at_least={at_least}")
    return need


def seconds(timeout: float | None) -> str:
    """Return ``timeout`` for a message: ``"1.5 s"``, or ``"forever"`` for None."""
    return "forever" if timeout is None else f"{timeout:.3g} s"
