"""Where a training step's wall time goes: explore, train, save, sync, eval, and the driver's share (the rest).

::

    clock = StepClock()
    with clock.span(TRAIN):          # any thread may open spans
        trainer.train_step(batch)
    split = clock.close_step()       # {"time/step_s": ..., "time/train_s": ..., "time/driver_s": ..., ...}

A step's window runs from the previous :meth:`StepClock.close_step` (or the
clock's start) to this one. Every instant of the window is counted once, by
the first of :data:`PRIORITY` whose span covers it, or else as driver time, so
the parts always add up to ``time/step_s`` and none is negative. Spans may
overlap (the explorer rolls out while the trainer steps): an overlapped
instant counts for the trainer's work, so ``time/explore_s`` is the rollout
time the trainer did not hide. A span still open when a step closes counts
up to then, and the rest of it in the next steps.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator

from trinity.monitor.keys import (
    DRIVER_SECONDS,
    EVAL_SECONDS,
    EXPLORE_SECONDS,
    ROLLOUT_SECONDS,
    SAVE_SECONDS,
    STEP_SECONDS,
    SYNC_SECONDS,
    TRAIN_SECONDS,
)

#: Span kinds: the trainer's update, a checkpoint save, a weight sync, an evaluation, a rollout batch.
TRAIN, SAVE, SYNC, EVAL, EXPLORE = "train", "save", "sync", "eval", "explore"
#: Which kind an instant counts for when spans overlap: the trainer's work first, then rollouts.
PRIORITY: tuple[str, ...] = (TRAIN, SAVE, SYNC, EVAL, EXPLORE)


#: Metric key of each part of a step.
PART_KEYS: dict[str, str] = {
    TRAIN: TRAIN_SECONDS,
    SAVE: SAVE_SECONDS,
    SYNC: SYNC_SECONDS,
    EVAL: EVAL_SECONDS,
    EXPLORE: EXPLORE_SECONDS,
}
#: Parts logged only in the steps that had some (a save, an evaluation).
OCCASIONAL: frozenset[str] = frozenset({SAVE, EVAL})


class StepClock:
    """Collects timed spans from any thread and splits each step's wall time among them (thread-safe)."""

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        """Start the first step's window now; ``now`` is the clock read (seconds, monotonic)."""
        self._now = now
        self._lock = threading.Lock()
        self._mark = now()
        self._closed: list[tuple[str, float, float]] = []
        self._open: dict[int, tuple[str, float]] = {}
        self._ids = itertools.count()

    @contextlib.contextmanager
    def span(self, kind: str) -> Iterator[None]:
        """Count the ``with`` block as ``kind`` (one of :data:`PRIORITY`); raises ValueError for another kind."""
        if kind not in PRIORITY:
            raise ValueError(f"unknown span kind {kind!r}; expected one of {', '.join(PRIORITY)}")
        with self._lock:
            key = next(self._ids)
            self._open[key] = (kind, self._now())
        try:
            yield
        finally:
            with self._lock:
                _, start = self._open.pop(key)
                self._closed.append((kind, start, self._now()))

    def add(self, kind: str, start: float, end: float) -> None:
        """Count ``[start, end]`` (read from the clock's ``now``) as ``kind``; raises ValueError for another kind."""
        if kind not in PRIORITY:
            raise ValueError(f"unknown span kind {kind!r}; expected one of {', '.join(PRIORITY)}")
        with self._lock:
            self._closed.append((kind, start, max(start, end)))

    def add_training(self, start: float, end: float, saving: float = 0.0) -> None:
        """Count a trainer step ``[start, end]`` whose last ``saving`` seconds saved a checkpoint."""
        saving = min(max(saving, 0.0), max(end - start, 0.0))
        self.add(TRAIN, start, end - saving)
        if saving > 0:
            self.add(SAVE, end - saving, end)

    def restart(self) -> None:
        """Start the next step's window now, forgetting what was counted since the last close."""
        with self._lock:
            self._mark = self._now()
            self._closed.clear()

    def close_step(self) -> dict[str, float]:
        """End the current step's window now and return its split (see the module docstring); the next starts."""
        with self._lock:
            end = self._now()
            begin, self._mark = self._mark, end
            spans = self._closed + [(kind, start, end) for kind, start in self._open.values()]
            self._closed = []
        clipped = [(kind, max(start, begin), min(stop, end)) for kind, start, stop in spans]
        clipped = [(kind, start, stop) for kind, start, stop in clipped if stop > start]
        parts = _split(clipped, begin, end)
        split = {STEP_SECONDS: end - begin}
        for kind in PRIORITY:
            if kind not in OCCASIONAL or parts[kind] > 0:
                split[PART_KEYS[kind]] = parts[kind]
        split[DRIVER_SECONDS] = parts[""]
        split[ROLLOUT_SECONDS] = _covered([(start, stop) for kind, start, stop in clipped if kind == EXPLORE])
        return split


def _split(spans: list[tuple[str, float, float]], begin: float, end: float) -> dict[str, float]:
    """Return the seconds of ``[begin, end]`` each kind counts for (``""``: covered by none)."""
    parts = dict.fromkeys((*PRIORITY, ""), 0.0)
    cuts = sorted({begin, end, *(t for _, start, stop in spans for t in (start, stop))})
    rank = {kind: index for index, kind in enumerate(PRIORITY)}
    for left, right in itertools.pairwise(cuts):
        active = [kind for kind, start, stop in spans if start <= left and stop >= right]
        parts[min(active, key=rank.__getitem__) if active else ""] += right - left
    return parts


def _covered(intervals: list[tuple[float, float]]) -> float:
    """Return the length of the union of ``intervals``."""
    total, reach = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop > reach:
            total += stop - max(start, reach)
            reach = stop
    return total
