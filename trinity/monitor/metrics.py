"""Small helpers for computing metrics: statistics of a list, tokens per second, a timer.

::

    metrics = summarize(rewards, "reward")          # reward/mean, reward/min, reward/max, reward/std
    with Timer(metrics, SYNC_SECONDS):               # metrics["time/sync_s"] = seconds taken
        synchronizer.sync()
    metrics[TOKENS_PER_SECOND] = tokens_per_second(num_tokens, generate_timer.seconds)
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, MutableMapping
from types import TracebackType
from typing import NamedTuple


class Stats(NamedTuple):
    """Summary statistics of a list of numbers (``std`` is the population standard deviation)."""

    mean: float
    min: float
    max: float
    std: float


def stats(values: Iterable[float]) -> Stats:
    """Return mean, min, max and population std of ``values``; raises :class:`ValueError` when empty.

    Accepts anything whose items convert with ``float()`` (numbers, numpy
    arrays, 1-d tensors).
    """
    data = [float(v) for v in values]
    if not data:
        raise ValueError("cannot summarize an empty list of values")
    mean = math.fsum(data) / len(data)
    variance = math.fsum((v - mean) ** 2 for v in data) / len(data)
    return Stats(mean=mean, min=min(data), max=max(data), std=math.sqrt(variance))


def summarize(values: Iterable[float], prefix: str) -> dict[str, float]:
    """Return ``{prefix/mean, prefix/min, prefix/max, prefix/std}``, or ``{}`` when ``values`` is empty.

    The empty case logs nothing rather than inventing a value.
    """
    data = [float(v) for v in values]
    if not data:
        return {}
    return {f"{prefix}/{name}": value for name, value in stats(data)._asdict().items()}


def tokens_per_second(num_tokens: float, seconds: float) -> float:
    """Return ``num_tokens / seconds``, or 0.0 when no time was measured (``seconds <= 0``)."""
    if seconds <= 0:
        return 0.0
    return float(num_tokens) / seconds


class Timer:
    """Measure wall-clock seconds of a ``with`` block (``time.perf_counter``).

    ``Timer(metrics, "time/sync_s")`` also stores the seconds in ``metrics``
    under that key when the block ends, even if it raises. ``seconds`` can be
    read while the block runs (time so far) and after it (final time).
    """

    def __init__(self, into: MutableMapping[str, float] | None = None, key: str | None = None) -> None:
        if (into is None) != (key is None):
            raise ValueError("give both `into` and `key`, or neither")
        self._into = into
        self._key = key
        self._start: float | None = None
        self._end: float | None = None

    @property
    def seconds(self) -> float:
        """Seconds from the start of the block to its end (or to now while it runs); 0.0 before it starts."""
        if self._start is None:
            return 0.0
        end = self._end if self._end is not None else time.perf_counter()
        return end - self._start

    def __enter__(self) -> Timer:
        self._start = time.perf_counter()
        self._end = None
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._end = time.perf_counter()
        if self._into is not None and self._key is not None:
            self._into[self._key] = self.seconds
