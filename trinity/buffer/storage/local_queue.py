"""``queue`` inside one process: the experience queue of mode ``both``, where the explorer and the trainer are
threads of the same driver.

Same rules as the Ray actor queue (:class:`~trinity.buffer.storage.ray_queue.QueueStorage`):
a batch is admitted whole when it fits (or into an empty queue), writers wait
for room, readers wait for experiences, ``close`` lets readers drain what is
left. What differs is the transport: the experiences are handed over as the
objects they are, with no pickling and no actor call each way. So the object
cannot leave its process: pickling it raises TypeError.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, NoReturn

from trinity.buffer.errors import BufferExhaustedError, StorageClosedError, StorageError, StorageTimeoutError
from trinity.buffer.storage.base import ExperienceStorage, check_count, seconds
from trinity.common.config.plan.data import StoragePlan
from trinity.common.experience import Experience


class LocalQueueStorage(ExperienceStorage):
    """An in-memory queue of one process (mode ``both``); see the module docstring."""

    storage_type = "queue"

    def __init__(self, name: str = "experience", capacity: int = 0) -> None:
        """Create an empty queue; raises StorageError when ``capacity`` is negative (0: unbounded)."""
        super().__init__(name)
        if capacity < 0:
            raise StorageError(f"queue storage {name!r}: capacity must be 0 (unbounded) or positive, got {capacity}")
        self.capacity = capacity
        self._items: deque[Experience] = deque()
        self._closed = False
        self._changed = threading.Condition()

    @classmethod
    def from_config(cls, config: StoragePlan, *, name: str, run_dir: Any = ".") -> LocalQueueStorage:
        """Return the queue of ``config`` (its capacity; the path is not used)."""
        return cls(name, capacity=config.capacity)

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            f"{self.describe()} lives in the process that made it (mode both) and cannot be sent to another; "
            "use a Ray queue (QueueStorage) or a persistent storage for explorers and trainers in other processes"
        )

    def _fits(self, count: int) -> bool:
        return self.capacity <= 0 or not self._items or len(self._items) + count <= self.capacity

    def put(self, experiences: Sequence[Experience], timeout: float | None = None) -> None:
        """Queue ``experiences`` as one batch, waiting for room (back-pressure); see the base class."""
        if not experiences:
            return
        with self._changed:
            if not self._changed.wait_for(lambda: self._closed or self._fits(len(experiences)), timeout):
                raise StorageTimeoutError(
                    f"{self.describe()} stayed full for {seconds(timeout)} (capacity {self.capacity}, "
                    f"{len(self._items)} queued, {len(experiences)} to add); the trainer is not reading fast enough: "
                    "check it or raise the capacity"
                )
            if self._closed:
                raise StorageClosedError(
                    f"{self.describe()} is closed for writing; {len(experiences)} experiences refused"
                )
            self._items.extend(experiences)
            self._changed.notify_all()

    def get(self, n: int, timeout: float | None = None, *, at_least: int | None = None) -> list[Experience]:
        """Return the next ``n`` experiences; see the base class."""
        need = check_count(n, at_least)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while len(self._items) < need and not self._closed:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise StorageTimeoutError(
                        f"{self.describe()}: waited {seconds(timeout)} for {need} experiences, "
                        f"{len(self._items)} queued; is the explorer running?"
                    )
                self._changed.wait(left)
            if not self._items:
                raise BufferExhaustedError(f"{self.describe()} is closed and every experience has been read")
            taken = [self._items.popleft() for _ in range(min(n, len(self._items)))]
            self._changed.notify_all()
            return taken

    def close(self) -> None:
        """Refuse further writes; readers drain what is left."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def size(self) -> int:
        """Return the number of queued experiences."""
        with self._changed:
            return len(self._items)
