"""What a monitor sink is, what it is built from, and the registry of sinks by name.

A sink is built by ``MONITOR_SINKS.get(name)(context)`` and then receives every
:class:`~trinity.monitor.records.MetricRecord` the monitor logs. A new sink is
one class (or factory function) registered under a new name::

    @MONITOR_SINKS.register("my_sink")
    class MySink(Sink):
        def __init__(self, context: SinkContext) -> None: ...
        def log(self, record: MetricRecord) -> None: ...
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from trinity.common.config.loader import ConfigError
from trinity.monitor.records import MetricRecord
from trinity.utils.registry import Registry


class MonitorError(RuntimeError):
    """Monitoring cannot go on as asked; the message is one line that says what to do."""


class SinkUnavailableError(MonitorError, ConfigError):
    """An enabled sink cannot start (a missing package, an unwritable folder); a configuration problem."""


@dataclass(frozen=True)
class SinkContext:
    """Everything a sink may be built from."""

    #: The run folder (``<checkpoint_root_dir>/<project>/<name>``); sinks write under it.
    run_dir: Path
    #: Steps the run will take, when known (progress and ETA).
    total_steps: int | None = None
    #: Project name (e.g. the wandb project).
    project: str = "trinity"
    #: Run name.
    name: str = "run"
    #: The run's whole configuration, as plain data (e.g. wandb's run config).
    run_config: Mapping[str, Any] = field(default_factory=dict)
    #: Where console output goes; ``None`` means standard output at the time of writing.
    stream: TextIO | None = None
    #: ``monitor.monitor_args``: options of the chosen monitor (wandb: ``entity``, ``tags``, ``group``, ...).
    options: Mapping[str, Any] = field(default_factory=dict)


class Sink(abc.ABC):
    """Receives every record a monitor logs."""

    #: True for a sink whose records are the run's own (the metrics file): a full, read-only or forbidden disk
    #: under it stops the run instead of turning the sink off.
    ends_run_on_storage_errors: bool = False

    @abc.abstractmethod
    def log(self, record: MetricRecord) -> None:
        """Take one record."""

    def resume(self, marker: MetricRecord) -> None:  # noqa: B027 - optional hook, nothing to do by default
        """The run resumed after a checkpoint (``marker``, phase ``resume``): steps after it are logged again.

        Called before the first :meth:`log` of a resumed run.
        """

    def flush(self) -> None:  # noqa: B027 - optional hook, nothing to do by default
        """Push buffered data to its destination."""

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to do by default
        """Flush and release resources; called once, last."""


#: Builds a sink from a :class:`SinkContext`.
SinkFactory = Callable[[SinkContext], Sink]

#: Monitor sinks, by name (``tensorboard``, ``jsonl``, ``wandb``, ``console``, ...).
MONITOR_SINKS: Registry[SinkFactory] = Registry("monitor sink")
