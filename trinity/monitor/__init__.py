"""Monitoring of a run: metrics to TensorBoard, JSON lines, wandb and the console; the reward curve.

Importing this package is cheap: TensorBoard (through torch), wandb, rich's
live display and matplotlib are imported only by the sink or plot that needs them.

* :class:`Monitor` — the façade: ``log(metrics, step, phase)``, ``flush()``, ``close()``.
* :data:`MONITOR_SINKS` — sinks by name: ``tensorboard``, ``jsonl``, ``wandb``, ``console``.
* :func:`plot_reward_curve` — the reward-curve PNG of a ``metrics.jsonl``.
* :mod:`trinity.monitor.metrics` — statistics of lists, tokens/s, :class:`Timer`.
* :mod:`trinity.monitor.keys` — phase names and the metric keys the display and plot look for.
"""

from trinity.monitor.keys import (
    METRICS_FILE,
    PHASE_EVAL,
    PHASE_EXPLORE,
    PHASE_TRAIN,
    REWARD_MEAN,
    REWARD_PLOT_FILE,
    SYNC_SECONDS,
    TENSORBOARD_DIR,
    TOKENS_PER_SECOND,
)
from trinity.monitor.metrics import Stats, Timer, stats, summarize, tokens_per_second
from trinity.monitor.monitor import MetricsWriteError, Monitor, enabled_sinks
from trinity.monitor.plot import plot_reward_curve
from trinity.monitor.records import MetricRecord, load_records
from trinity.monitor.sink import MONITOR_SINKS, MonitorError, Sink, SinkContext, SinkUnavailableError

__all__ = [
    "METRICS_FILE",
    "MONITOR_SINKS",
    "PHASE_EVAL",
    "PHASE_EXPLORE",
    "PHASE_TRAIN",
    "REWARD_MEAN",
    "REWARD_PLOT_FILE",
    "SYNC_SECONDS",
    "TENSORBOARD_DIR",
    "TOKENS_PER_SECOND",
    "MetricRecord",
    "MetricsWriteError",
    "Monitor",
    "MonitorError",
    "Sink",
    "SinkContext",
    "SinkUnavailableError",
    "Stats",
    "Timer",
    "enabled_sinks",
    "load_records",
    "plot_reward_curve",
    "stats",
    "summarize",
    "tokens_per_second",
]
