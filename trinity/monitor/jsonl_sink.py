"""``jsonl`` sink: one JSON object per ``log`` call in ``<run>/metrics.jsonl``, flushed line by line.

Each line is handed to the operating system as it is written, so a process
that dies (even by SIGKILL) loses nothing it logged. A restarted run appends
to the same file; a last line cut short by a crash is ended first so that it
cannot swallow the next record. A resumed run first writes a resume marker
(:func:`~trinity.monitor.records.resume_marker`): the rows before it for steps
after the checkpoint are superseded (:func:`~trinity.monitor.records.current_records`).
"""

from __future__ import annotations

import os
from pathlib import Path

from trinity.monitor.keys import METRICS_FILE
from trinity.monitor.records import MetricRecord
from trinity.monitor.sink import MONITOR_SINKS, Sink, SinkContext, SinkUnavailableError


def _ends_cut_short(path: Path) -> bool:
    """Return True when ``path`` is non-empty and does not end with a newline."""
    try:
        with open(path, "rb") as file:
            file.seek(0, os.SEEK_END)
            if file.tell() == 0:
                return False
            file.seek(-1, os.SEEK_END)
            return file.read(1) != b"\n"
    except FileNotFoundError:
        return False


@MONITOR_SINKS.register("jsonl")
class JsonlSink(Sink):
    """Appends records to ``<run>/metrics.jsonl``; a failed write raises OSError naming the file."""

    ends_run_on_storage_errors = True

    def __init__(self, context: SinkContext) -> None:
        #: The metrics file.
        self.path = Path(context.run_dir) / METRICS_FILE
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            cut_short = _ends_cut_short(self.path)
            self._file = open(self.path, "a", encoding="utf-8", buffering=1)  # closed in close()
        except OSError as exc:
            raise SinkUnavailableError(f"cannot write metrics to {str(self.path)!r}: {exc.strerror or exc}") from None
        if cut_short:
            self._file.write("\n")

    def log(self, record: MetricRecord) -> None:
        """Write ``record`` as one line and hand it to the operating system at once."""
        try:
            self._file.write(record.to_json() + "\n")
            self._file.flush()
        except OSError as exc:
            exc.filename = exc.filename or str(self.path)
            raise

    def resume(self, marker: MetricRecord) -> None:
        """Write the resume marker, so readers drop the rows it supersedes."""
        self.log(marker)

    def flush(self) -> None:
        """Flush and ask the operating system to put the file on disk."""
        if not self._file.closed:
            try:
                self._file.flush()
                os.fsync(self._file.fileno())
            except OSError as exc:
                exc.filename = exc.filename or str(self.path)
                raise

    def close(self) -> None:
        """Flush to disk and close the file."""
        if not self._file.closed:
            self.flush()
            self._file.close()
