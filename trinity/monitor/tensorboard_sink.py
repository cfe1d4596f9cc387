"""``tensorboard`` sink: scalars as TensorBoard event files under ``<run>/tensorboard``.

Each metric ``key`` of phase ``phase`` becomes the scalar tag ``phase/key``
(``train/reward/mean``), so TensorBoard groups the charts by phase. The writer
is PyTorch's ``SummaryWriter``, imported only when this sink is built. After a
resume the writer is reopened with ``purge_step``, so the steps the crashed run
logged but did not checkpoint show once, as the resumed run logs them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trinity.monitor.keys import TENSORBOARD_DIR
from trinity.monitor.records import MetricRecord
from trinity.monitor.sink import MONITOR_SINKS, Sink, SinkContext, SinkUnavailableError

#: Seconds between background flushes of the event file.
FLUSH_SECONDS = 10


def scalar_tag(phase: str, key: str) -> str:
    """Return the TensorBoard (and wandb) tag of metric ``key`` logged in ``phase``."""
    return f"{phase}/{key}"


@MONITOR_SINKS.register("tensorboard")
class TensorBoardSink(Sink):
    """Writes every metric as a scalar at the record's step and wall time."""

    def __init__(self, context: SinkContext) -> None:
        #: The folder of the event files.
        self.log_dir = Path(context.run_dir) / TENSORBOARD_DIR
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise SinkUnavailableError(
                f"monitor.tensorboard is true but TensorBoard cannot be imported ({exc}); "
                "install tensorboard or set monitor.tensorboard: false"
            ) from None
        self._writer: Any = self._open(SummaryWriter)
        self._closed = False

    def _open(self, writer_class: Any, **kwargs: Any) -> Any:
        try:
            return writer_class(log_dir=str(self.log_dir), flush_secs=FLUSH_SECONDS, **kwargs)
        except OSError as exc:
            raise SinkUnavailableError(f"cannot write TensorBoard events to {str(self.log_dir)!r}: {exc}") from None

    def resume(self, marker: MetricRecord) -> None:
        """Reopen the event file with ``purge_step``: TensorBoard hides the earlier events of the steps logged again."""
        first_again = min([marker.step, *(marker.extra.get("resumed_from") or {}).values()]) + 1
        writer_class = type(self._writer)
        self._writer.close()
        self._writer = self._open(writer_class, purge_step=first_again)

    def log(self, record: MetricRecord) -> None:
        """Add one scalar per metric."""
        for key, value in record.metrics.items():
            self._writer.add_scalar(scalar_tag(record.phase, key), value, global_step=record.step, walltime=record.time)

    def flush(self) -> None:
        """Write pending events to the event file."""
        if not self._closed:
            self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        if not self._closed:
            self._closed = True
            self._writer.close()
