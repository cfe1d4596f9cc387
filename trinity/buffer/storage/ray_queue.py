"""``queue``: experiences held in memory by one Ray actor, with a capacity that pushes back on writers.

The actor is asynchronous: a writer waiting for room and a reader waiting for
experiences each hold only a coroutine, so neither blocks the other. A batch
is admitted whole, when it fits (or when the queue is empty, so a batch larger
than the capacity still goes through). Nothing survives the actor: this
storage has no checkpointable position.
"""

from __future__ import annotations

import asyncio
import functools
import pickle
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayActorError

from trinity.buffer.errors import BufferExhaustedError, StorageClosedError, StorageError, StorageTimeoutError
from trinity.buffer.storage.base import STORAGES, ExperienceStorage, check_count, seconds
from trinity.common.config.plan.data import StoragePlan
from trinity.common.experience import Experience


def _queue_actor_class() -> type:
    """Return the actor class, defined here so that Ray ships it by value.

    The actor process then imports nothing of trinity (nor torch): it holds
    pickled experiences as opaque bytes, and starts in a fraction of a second.
    """

    class QueueActor:
        """The Ray actor behind :class:`QueueStorage`; its methods report outcomes as values, never by raising."""

        def __init__(self, capacity: int) -> None:
            self.capacity = capacity
            self.items: deque[Any] = deque()
            self.closed = False
            self._changed: asyncio.Condition | None = None

        def _condition(self) -> asyncio.Condition:
            # created on first use, inside the actor's event loop
            if self._changed is None:
                self._changed = asyncio.Condition()
            return self._changed

        def _fits(self, count: int) -> bool:
            return self.capacity <= 0 or not self.items or len(self.items) + count <= self.capacity

        async def put(self, items: list[Any], timeout: float | None) -> tuple[str, int]:
            """Append ``items`` once they fit; returns ``("ok" | "timeout" | "closed", queued count)``."""
            changed = self._condition()
            async with changed:
                try:
                    await asyncio.wait_for(changed.wait_for(lambda: self.closed or self._fits(len(items))), timeout)
                except asyncio.TimeoutError:
                    return "timeout", len(self.items)
                if self.closed:
                    return "closed", len(self.items)
                self.items.extend(items)
                changed.notify_all()
                return "ok", len(self.items)

        async def get(self, n: int, at_least: int, timeout: float | None) -> tuple[str, list[Any], int]:
            """Take up to ``n`` items once ``at_least`` are there; returns ``(status, items, queued count)``.

            The status is ``"ok"``, ``"timeout"`` or ``"exhausted"``.
            """
            changed = self._condition()
            async with changed:
                try:
                    await asyncio.wait_for(
                        changed.wait_for(lambda: self.closed or len(self.items) >= at_least), timeout
                    )
                except asyncio.TimeoutError:
                    return "timeout", [], len(self.items)
                if not self.items:
                    return "exhausted", [], 0
                taken = [self.items.popleft() for _ in range(min(n, len(self.items)))]
                changed.notify_all()
                return "ok", taken, len(self.items)

        async def close(self) -> None:
            """Refuse further writes and wake every waiter."""
            changed = self._condition()
            async with changed:
                self.closed = True
                changed.notify_all()

        async def size(self) -> int:
            """Return the number of queued items."""
            return len(self.items)

    return QueueActor


@functools.cache
def _remote_actor_class() -> Any:
    """Return the Ray actor class (made once per process)."""
    return ray.remote(_queue_actor_class())


@STORAGES.register("queue")
class QueueStorage(ExperienceStorage):
    """An in-memory queue in a named Ray actor (``trinity-buffer-<name>``); see the module docstring."""

    storage_type = "queue"

    def __init__(self, name: str = "experience", capacity: int = 0) -> None:
        """Create the queue actor, or attach to the running one of that name.

        Raises StorageError when Ray is not initialised or ``capacity`` is negative.
        """
        super().__init__(name)
        if capacity < 0:
            raise StorageError(f"queue storage {name!r}: capacity must be 0 (unbounded) or positive, got {capacity}")
        if not ray.is_initialized():
            raise StorageError(f"queue storage {name!r} needs Ray; connect to a cluster (ray.init) first")
        self.capacity = capacity
        self.actor_name = f"trinity-buffer-{name}"
        self._actor: Any = _remote_actor_class().options(
            name=self.actor_name, get_if_exists=True, num_cpus=0, max_concurrency=1000
        ).remote(capacity)

    @classmethod
    def from_config(cls, config: StoragePlan, *, name: str, run_dir: str | Path) -> QueueStorage:
        """Return the queue of ``config`` (its capacity; the path is not used)."""
        return cls(name, capacity=config.capacity)

    def _call(self, ref: Any) -> Any:
        try:
            return ray.get(ref)
        except RayActorError as exc:
            raise StorageError(
                f"{self.describe()}: its actor {self.actor_name!r} died ({exc.__class__.__name__})"
            ) from None

    def put(self, experiences: Sequence[Experience], timeout: float | None = None) -> None:
        """Queue ``experiences`` as one batch, waiting for room (back-pressure); see the base class."""
        if not experiences:
            return
        status, queued = self._call(self._actor.put.remote([pickle.dumps(e, protocol=5) for e in experiences], timeout))
        if status == "timeout":
            raise StorageTimeoutError(
                f"{self.describe()} stayed full for {seconds(timeout)} (capacity {self.capacity}, {queued} queued, "
                f"{len(experiences)} to add); the trainer is not reading fast enough: check it or raise the capacity"
            )
        if status == "closed":
            raise StorageClosedError(f"{self.describe()} is closed for writing; {len(experiences)} experiences refused")

    def get(self, n: int, timeout: float | None = None, *, at_least: int | None = None) -> list[Experience]:
        """Return the next ``n`` experiences; see the base class."""
        need = check_count(n, at_least)
        status, items, queued = self._call(self._actor.get.remote(n, need, timeout))
        if status == "timeout":
            raise StorageTimeoutError(
                f"{self.describe()}: waited {seconds(timeout)} for {need} experiences, {queued} queued; "
                "is the explorer running?"
            )
        if status == "exhausted":
            raise BufferExhaustedError(f"{self.describe()} is closed and every experience has been read")
        return [pickle.loads(item) for item in items]

    def close(self) -> None:
        """Refuse further writes; readers drain what is left."""
        self._call(self._actor.close.remote())

    def size(self) -> int:
        """Return the number of queued experiences."""
        return int(self._call(self._actor.size.remote()))

    def release(self) -> None:
        """Kill the queue actor (its experiences are lost)."""
        ray.kill(self._actor)
