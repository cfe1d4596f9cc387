"""Cohorts: requests the explorer starts together, so an engine can serve them as one batch.

The scheduler starts a step's task attempts in one burst, but their first
engine calls reach the engine spread over several milliseconds (each runner
builds its workflow and prompt first, and the driver's threads share one
interpreter). An engine that waits a fixed time for company then serves the
step as two or three generate calls, each about as slow as one big one.

So the scheduler names each burst a *cohort* of ``size`` attempts per engine,
and each attempt's first sampling call says it belongs to it
(``EngineClient`` calls ``in_cohort``). The engine, before serving, waits while
a cohort it has heard from still misses members, but never longer than
:data:`COHORT_WAIT_S` after the cohort's first member arrived: an attempt that
fails before its first call (or a workflow that never samples) costs one bounded
wait, not a stall.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

#: Longest wait (seconds) for a cohort's missing members, counted from its first arrival.
COHORT_WAIT_S = 0.03

#: Engine methods a cohort member may call (the sampling ones).
COHORT_METHODS = frozenset({"chat", "generate", "generate_tokens"})


@dataclass
class _Open:
    missing: int
    until: float


class Cohorts:
    """The cohorts an engine has heard from and the members each still misses (thread-safe)."""

    def __init__(self, wait_s: float = COHORT_WAIT_S) -> None:
        self.wait_s = wait_s
        self._open: dict[str, _Open] = {}
        self._lock = threading.Lock()
        self._current = threading.local()

    def arrived(self, cohort: str, size: int) -> None:
        """Count one member of ``cohort`` (``size`` members in all) as arrived."""
        now = time.monotonic()
        with self._lock:
            entry = self._open.get(cohort)
            if entry is None:
                entry = self._open[cohort] = _Open(missing=size, until=now + self.wait_s)
            entry.missing -= 1
            if entry.missing <= 0:
                del self._open[cohort]

    def waiting(self) -> bool:
        """Return True while a cohort heard from misses members and its wait has not run out."""
        now = time.monotonic()
        with self._lock:
            for name in [n for n, e in self._open.items() if e.until <= now]:
                del self._open[name]
            return bool(self._open)

    def enter(self, cohort: str, size: int) -> None:
        """Mark the calling thread's call as a member of ``cohort`` until :meth:`leave`."""
        self._current.value = (cohort, size)

    def leave(self) -> None:
        """End the calling thread's membership set by :meth:`enter`."""
        self._current.value = None

    def take_current(self) -> tuple[str, int] | None:
        """Return the calling thread's cohort and clear it (a call counts as a member once)."""
        value: tuple[str, int] | None = getattr(self._current, "value", None)
        self._current.value = None
        return value
