"""One logged set of metrics (:class:`MetricRecord`), its JSON line, and reading a metrics file back."""

from __future__ import annotations

import json
import logging
import math
import numbers
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: A metric value: ints stay ints; non-finite floats are written to JSON as ``null`` and read back as NaN.
MetricValue = float | int


def to_metric_value(key: str, value: Any) -> MetricValue:
    """Return ``value`` as an ``int`` or ``float``; raises :class:`TypeError` naming ``key`` otherwise.

    Accepts Python and numpy numbers and 0-d tensors (anything with ``.item()``
    that gives a real number); ``bool`` becomes ``int``.
    """
    raw = value
    if not isinstance(raw, numbers.Real) and hasattr(raw, "item"):
        try:
            raw = raw.item()
        except (TypeError, ValueError, RuntimeError):  # a tensor with more than one element
            raw = value
    if isinstance(raw, numbers.Integral):
        return int(raw)
    if isinstance(raw, numbers.Real):
        return float(raw)
    raise TypeError(f"metric {key!r} must be a number, got {type(value).__name__} {value!r:.60}")


def to_metrics(metrics: Mapping[str, Any]) -> dict[str, MetricValue]:
    """Return ``metrics`` with string keys and number values; raises :class:`TypeError` naming a bad entry."""
    out: dict[str, MetricValue] = {}
    for key, value in metrics.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"metric names must be non-empty strings, got {key!r}")
        out[key] = to_metric_value(key, value)
    return out


#: The fields every line has; anything else is kept in :attr:`MetricRecord.extra`.
_FIELDS = frozenset({"step", "phase", "time", "metrics"})


@dataclass(frozen=True)
class MetricRecord:
    """What one ``Monitor.log`` call logged."""

    #: Step the metrics belong to (trainer or explorer step, evaluation step).
    step: int
    #: ``train``, ``explore``, ``eval`` or any other phase name.
    phase: str
    #: Wall-clock seconds since the Unix epoch.
    time: float
    #: Metric name to value.
    metrics: Mapping[str, MetricValue] = field(default_factory=dict)
    #: Further top-level fields of the line (a resume marker's ``run_id`` and ``resumed_from_step``).
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """Return the record as one line of strict JSON (no newline; non-finite values as ``null``)."""
        values = {k: (v if isinstance(v, int) or math.isfinite(v) else None) for k, v in self.metrics.items()}
        data = {**self.extra, "step": self.step, "phase": self.phase, "time": round(self.time, 6), "metrics": values}
        return json.dumps(data, allow_nan=False, ensure_ascii=False)

    @classmethod
    def from_json(cls, line: str) -> MetricRecord:
        """Parse a line written by :meth:`to_json`; raises :class:`ValueError` if it is not one."""
        data = json.loads(line)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        step, phase, when, metrics = data.get("step"), data.get("phase"), data.get("time", 0.0), data.get("metrics")
        if isinstance(step, bool) or not isinstance(step, int):
            raise ValueError(f"'step' must be an integer, got {step!r}")
        if not isinstance(phase, str):
            raise ValueError(f"'phase' must be a string, got {phase!r}")
        if not isinstance(metrics, dict):
            raise ValueError(f"'metrics' must be an object, got {metrics!r}")
        values = {str(k): (math.nan if v is None else to_metric_value(str(k), v)) for k, v in metrics.items()}
        extra = {k: v for k, v in data.items() if k not in _FIELDS}
        return cls(step=step, phase=phase, time=float(when), metrics=values, extra=extra)


def iter_records(path: str | Path) -> Iterator[MetricRecord]:
    """Yield the records of a metrics JSONL file in order.

    Blank and unreadable lines (a line cut short by a crash, a stray edit) are
    skipped with a debug log, so a damaged file still yields everything else.
    """
    with open(path, encoding="utf-8", errors="replace") as file:
        for number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            try:
                yield MetricRecord.from_json(line)
            except (ValueError, TypeError) as exc:
                logger.debug("%s:%d: skipped unreadable metrics line: %s", path, number, exc)


def load_records(path: str | Path, *, raw: bool = False) -> list[MetricRecord]:
    """Return the records of a metrics JSONL file, each step once (see :func:`current_records`).

    With ``raw`` every readable line is returned as written, resume markers
    and superseded rows included (see :func:`iter_records`).
    """
    records = iter_records(path)
    return list(records) if raw else current_records(records)


#: Phase of the marker a resumed run writes before its first record.
PHASE_RESUME = "resume"


def resume_marker(
    step: int,
    run_id: str,
    phases: Mapping[str, int] | None = None,
    when: float = 0.0,
    scope: Iterable[str] | None = None,
) -> MetricRecord:
    """Return the marker record of a run resumed after ``step`` (``phases``: other resume points by phase).

    ``scope`` names the phases the resumed run writes when it is not the only
    writer of the file (a mode ``train`` job beside a mode ``explore`` job):
    the marker then supersedes rows of those phases only. None: every phase.
    """
    extra: dict[str, Any] = {"run_id": run_id, "resumed_from_step": int(step)}
    if phases:
        extra["resumed_from"] = {phase: int(at) for phase, at in phases.items()}
    if scope is not None:
        extra["phases"] = sorted(set(scope))
    return MetricRecord(step=int(step), phase=PHASE_RESUME, time=when, extra=extra)


def resumed_from(marker: MetricRecord, phase: str) -> int | None:
    """Return the last step of ``phase`` that the run resumed by ``marker`` kept (later ones are logged again).

    None when the marker does not cover ``phase`` (another job writes it): none of its rows is superseded.
    """
    scope = marker.extra.get("phases")
    if scope is not None and phase not in scope:
        return None
    phases = marker.extra.get("resumed_from") or {}
    at = phases.get(phase, marker.extra.get("resumed_from_step", marker.step))
    return int(at)


def _kept(record: MetricRecord, resumed_at: int | None) -> bool:
    return resumed_at is None or record.step <= resumed_at


def current_records(records: Iterable[MetricRecord]) -> list[MetricRecord]:
    """Return ``records`` without resume markers and without the rows a resume superseded.

    A row written before a resume marker, for a step after the one its phase
    resumed from, belongs to work the crashed run did not checkpoint: the
    resumed run does that step again and logs it anew, so the old row is dropped.
    """
    kept: list[MetricRecord] = []
    for record in records:
        if record.phase == PHASE_RESUME:
            kept = [r for r in kept if _kept(r, resumed_from(record, r.phase))]
        else:
            kept.append(record)
    return kept
