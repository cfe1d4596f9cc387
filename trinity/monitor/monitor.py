"""The :class:`Monitor` façade: one ``log`` call fanned out to every enabled sink.

::

    monitor = Monitor.for_run(plan)                      # or Monitor(plan.monitor, run_dir, total_steps=...)
    monitor.log({REWARD_MEAN: 0.4, "loss": 1.2}, step=1, phase="train")
    monitor.close()                                      # flushes everything, draws reward_curve.png

A sink that fails while logging is reported once (a warning) and dropped, so
a broken dashboard never stops a run; a sink that cannot start is an error at
once. The exception is a sink that keeps the run's own record on disk
(:attr:`~trinity.monitor.sink.Sink.ends_run_on_storage_errors`, the metrics
file): when the disk is full, over quota, read-only or forbidden there, the
run stops with :class:`MetricsWriteError` (exit status 2) instead of going on
without its record.
"""

from __future__ import annotations

import dataclasses
import logging
import numbers
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from trinity.common.config.plan.run import MonitorPlan, RunPlan
from trinity.errors import BadInputError, describe_storage_error, storage_error

# The sink modules register themselves in MONITOR_SINKS when imported.
from trinity.monitor import console_sink, jsonl_sink, tensorboard_sink, wandb_sink  # noqa: F401
from trinity.monitor.console_sink import ProgressClock, format_line
from trinity.monitor.keys import METRICS_FILE, PHASE_EVAL, REWARD_PLOT_FILE
from trinity.monitor.records import MetricRecord, resume_marker, to_metrics
from trinity.monitor.run_log import METRICS_LOGGER
from trinity.monitor.sink import MONITOR_SINKS, MonitorError, Sink, SinkContext

logger = logging.getLogger(__name__)
_metric_lines = logging.getLogger(METRICS_LOGGER)


class MetricsWriteError(MonitorError, BadInputError):
    """The run's metrics file cannot be written: the disk is full, over quota, read-only or forbidden (exit 2)."""


def enabled_sinks(config: MonitorPlan) -> list[str]:
    """Return the names of the sinks ``config`` turns on, in start order.

    wandb starts first: it is the one most likely to be missing, and failing
    before any file is written leaves the run folder clean.
    """
    sinks = []
    if config.monitor_type == "wandb":
        sinks.append("wandb")
    if config.jsonl:
        sinks.append("jsonl")
    if config.monitor_type == "tensorboard":
        sinks.append("tensorboard")
    if config.progress:
        sinks.append("console")
    return sinks


class Monitor:
    """Logs metrics to the sinks a :class:`MonitorPlan` enables, under one run folder.

    ``extra_sinks`` names further sinks registered in
    :data:`~trinity.monitor.sink.MONITOR_SINKS`. ``stream`` is where the
    console sink writes (standard output by default). Usable as a context
    manager (closed on exit).
    """

    def __init__(
        self,
        config: MonitorPlan,
        run_dir: str | Path,
        *,
        total_steps: int | None = None,
        project: str = "trinity",
        name: str = "run",
        run_config: Mapping[str, Any] | None = None,
        extra_sinks: Sequence[str] = (),
        stream: TextIO | None = None,
    ) -> None:
        self.config = config
        #: The run folder; sinks write under it.
        self.run_dir = Path(run_dir)
        self.title = f"{project}/{name} reward"
        context = SinkContext(
            run_dir=self.run_dir,
            total_steps=total_steps if total_steps and total_steps > 0 else None,
            project=project,
            name=name,
            run_config=dict(run_config or {}),
            stream=stream,
            options=dict(config.monitor_args),
        )
        names = list(dict.fromkeys([*enabled_sinks(config), *(n.strip().lower() for n in extra_sinks)]))
        factories = [(n, MONITOR_SINKS.get(n)) for n in names]  # unknown names fail before anything starts
        self._sinks: dict[str, Sink] = {}
        try:
            for sink_name, factory in factories:
                self._sinks[sink_name] = factory(context)
        except BaseException:
            self._close_sinks()
            raise
        #: The metrics file when the ``jsonl`` sink started (the plot's source).
        self._metrics_file = self.run_dir / METRICS_FILE if "jsonl" in self._sinks else None
        #: Reward points kept in memory for the plot while no metrics file is written.
        self._reward_history: list[MetricRecord] = []
        self._lock = threading.Lock()
        self._closed = False
        #: The reward curve, once :meth:`close` has drawn it.
        self.plot_path: Path | None = None
        #: Step progress of the full metric lines (elapsed time and ETA).
        self._line_clock = ProgressClock(context.total_steps)
        #: This process's run of the job (a resumed job gets a new one), as resume markers name it.
        self.run_id = uuid.uuid4().hex[:12]

    @classmethod
    def for_run(cls, plan: RunPlan, **kwargs: Any) -> Monitor:
        """Return the monitor of a whole run (its folder, step count, names, settings)."""
        config = plan.config
        kwargs.setdefault("total_steps", plan.buffer.total_steps or plan.trainer.total_steps or None)
        kwargs.setdefault("project", config.project)
        kwargs.setdefault("name", config.name)
        kwargs.setdefault("run_config", dataclasses.asdict(config))
        return cls(plan.monitor, plan.run_dir, **kwargs)

    @property
    def sink_names(self) -> list[str]:
        """Names of the sinks still receiving records."""
        return list(self._sinks)

    @property
    def metrics_path(self) -> Path | None:
        """The metrics JSONL file, or None when the ``jsonl`` sink is off."""
        return self.run_dir / METRICS_FILE if "jsonl" in self._sinks else None

    def log(self, metrics: Mapping[str, float | int], step: int, phase: str) -> None:
        """Send ``metrics`` of ``step`` in ``phase`` (``train``, ``explore``, ``eval``...) to every sink.

        Raises :class:`TypeError`/:class:`ValueError` for a non-number metric,
        a negative step or an empty phase, and :class:`MonitorError` after :meth:`close`.
        """
        if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
            raise ValueError(f"step must be a non-negative integer, got {step!r}")
        step = int(step)
        if not isinstance(phase, str) or not phase.strip():
            raise ValueError(f"phase must be a non-empty string, got {phase!r}")
        record = MetricRecord(step=step, phase=phase.strip(), time=time.time(), metrics=to_metrics(metrics))
        with self._lock:
            if self._closed:
                raise MonitorError("cannot log to a closed monitor")
            if self.config.plot and "jsonl" not in self._sinks:
                self._remember_rewards(record)
            for sink_name, sink in list(self._sinks.items()):
                try:
                    sink.log(record)
                except Exception as exc:  # noqa: BLE001 - a broken sink must not stop the run; reported below
                    self._drop(sink_name, sink, exc)
            if record.phase != PHASE_EVAL:
                self._line_clock.advance(record.step)
            # in full, whatever the console shows: the run's log file takes it (and the console with -v)
            if _metric_lines.isEnabledFor(logging.INFO):  # no run log and no -v: no line to format
                _metric_lines.info("%s", format_line(record, self._line_clock, full=True))

    def mark_resume(
        self, step: int, phases: Mapping[str, int] | None = None, scope: Iterable[str] | None = None
    ) -> MetricRecord:
        """Record that this run resumed after ``step`` (``phases``: other phases' resume points); return the marker.

        Call before the first :meth:`log`. The metrics file gets a ``resume``
        record carrying this run's id; rows logged earlier for later steps are
        superseded (readers drop them), and TensorBoard purges them. ``scope``
        limits the superseding to the phases this run writes (see
        :func:`~trinity.monitor.records.resume_marker`).
        """
        marker = resume_marker(step, self.run_id, phases, when=time.time(), scope=scope)
        with self._lock:
            for sink_name, sink in list(self._sinks.items()):
                try:
                    sink.resume(marker)
                except Exception as exc:  # noqa: BLE001 - as in log()
                    self._drop(sink_name, sink, exc)
        return marker

    def flush(self) -> None:
        """Push every sink's buffered data to its destination."""
        with self._lock:
            for sink_name, sink in list(self._sinks.items()):
                try:
                    sink.flush()
                except Exception as exc:  # noqa: BLE001 - as in log()
                    self._drop(sink_name, sink, exc)

    def close(self) -> Path | None:
        """Flush and close every sink, then draw the reward curve if ``plot`` is on; return its path.

        Closing twice is harmless. A failing plot is a warning, not an error.
        """
        with self._lock:
            if self._closed:
                return self.plot_path
            self._closed = True
            self._close_sinks()
        if self.config.plot:
            self.plot_path = self._plot()
        return self.plot_path

    def _plot(self) -> Path | None:
        from trinity.monitor.plot import plot_reward_curve

        out = self.run_dir / REWARD_PLOT_FILE
        try:
            if self._metrics_file is not None and self._metrics_file.exists():
                return plot_reward_curve(self._metrics_file, out, title=self.title)
            return plot_reward_curve(self._reward_history, out, title=self.title)
        except Exception as exc:  # noqa: BLE001 - the run is over; a missing picture is worth a warning only
            logger.warning("could not draw the reward curve %s: %s: %s", out, type(exc).__name__, exc)
            return None

    def _remember_rewards(self, record: MetricRecord) -> None:
        from trinity.monitor.plot import is_reward_key

        rewards = {k: v for k, v in record.metrics.items() if is_reward_key(k)}
        if rewards:
            self._reward_history.append(dataclasses.replace(record, metrics=rewards))

    def _drop(self, sink_name: str, sink: Sink, exc: Exception) -> None:
        """Turn the failed sink off with a warning; raise MetricsWriteError when it must not be lost."""
        disk = storage_error(exc) if sink.ends_run_on_storage_errors else None
        if disk is not None:
            del self._sinks[sink_name]
            try:
                sink.close()
            except Exception:  # the same full disk fails its close too; the error below says it
                logger.debug("closing failed sink %r failed as well", sink_name, exc_info=True)
            raise MetricsWriteError(f"cannot log metrics: {describe_storage_error(disk)}") from exc
        logger.warning(
            "monitor sink %r failed and is turned off for the rest of the run: %s: %s",
            sink_name,
            type(exc).__name__,
            exc,
        )
        del self._sinks[sink_name]
        try:
            sink.close()
        except Exception:  # it already failed once; its close may fail too
            logger.debug("closing failed sink %r failed as well", sink_name, exc_info=True)

    def _close_sinks(self) -> None:
        """Close every sink in reverse start order, each even if another fails."""
        sinks, self._sinks = self._sinks, {}
        for sink_name, sink in reversed(list(sinks.items())):
            try:
                sink.close()
            except Exception as exc:  # noqa: BLE001 - the others must still be closed
                logger.warning("closing monitor sink %r failed: %s: %s", sink_name, type(exc).__name__, exc)

    def __enter__(self) -> Monitor:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
