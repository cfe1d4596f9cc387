"""``wandb`` sink: metrics to Weights & Biases, when the ``wandb`` package is installed.

Tags are ``phase/key`` as in TensorBoard. The step is logged as the metric
``step`` that every other metric is plotted against, so records that arrive
out of step order (an explorer ahead of the trainer) are kept, not dropped.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from trinity.monitor.records import MetricRecord
from trinity.monitor.sink import MONITOR_SINKS, Sink, SinkContext, SinkUnavailableError
from trinity.monitor.tensorboard_sink import scalar_tag

#: The message when wandb is enabled but cannot be imported.
MISSING_WANDB = (
    "monitor.monitor_type is wandb but the wandb package is not installed; "
    "run `pip install wandb` or set monitor.monitor_type: tensorboard"
)


def import_wandb() -> Any:
    """Return the ``wandb`` module; raises :class:`SinkUnavailableError` with one line when it is missing."""
    try:
        return importlib.import_module("wandb")
    except ImportError:
        raise SinkUnavailableError(MISSING_WANDB) from None


@MONITOR_SINKS.register("wandb")
class WandbSink(Sink):
    """Starts a wandb run named after the trinity run and logs every record to it."""

    def __init__(self, context: SinkContext) -> None:
        wandb = import_wandb()
        Path(context.run_dir).mkdir(parents=True, exist_ok=True)
        self._run: Any = wandb.init(**{
            "project": context.project,
            "name": context.name,
            "dir": str(context.run_dir),
            "config": dict(context.run_config),
            **dict(context.options),
        })
        self._run.define_metric("step")
        self._run.define_metric("*", step_metric="step")
        self._closed = False

    def log(self, record: MetricRecord) -> None:
        """Log the record's metrics with its step."""
        data: dict[str, Any] = {scalar_tag(record.phase, k): v for k, v in record.metrics.items()}
        data["step"] = record.step
        self._run.log(data)

    def close(self) -> None:
        """Finish the wandb run (uploads what is pending)."""
        if not self._closed:
            self._closed = True
            self._run.finish()
