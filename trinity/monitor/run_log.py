"""``<run>/trinity.log``: the run's own log, whatever the console shows.

While a run's session is open, every line the framework logs at INFO and up
(the ``trinity`` loggers, and workflow code's ``trinity.utils.log.get_logger``)
and every metric record in full (``[train] step 3/160 | reward 0.51 | ...``
with all its metrics) are appended to ``<run>/trinity.log`` with a
timestamp. The console keeps one live line on a terminal; the file keeps
everything, to read during the run (``tail -f``) or after it.
"""

from __future__ import annotations

import logging
from pathlib import Path

#: The run log's file name, in the run folder.
RUN_LOG_FILE = "trinity.log"
#: The logger metric records are written through (a child of ``trinity``: the run log's handler takes them).
METRICS_LOGGER = "trinity.metrics"
#: The attribute a console log handler carries (the CLI's): metric lines reaching it reach the console.
CONSOLE_HANDLER_MARK = "trinity_console"

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class RunLog:
    """The file handler of ``<run>/trinity.log`` on the ``trinity`` logger, from construction to :meth:`close`."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / RUN_LOG_FILE
        self.handler = logging.FileHandler(self.path, encoding="utf-8")
        self.handler.setLevel(logging.INFO)
        self.handler.setFormatter(logging.Formatter(_FORMAT))
        self._logger = logging.getLogger("trinity")
        self._level = self._logger.level
        if self._logger.getEffectiveLevel() > logging.INFO:  # the console may show warnings only; the file more
            self._logger.setLevel(logging.INFO)
        self._logger.addHandler(self.handler)

    def close(self) -> None:
        """Stop writing the file and give the ``trinity`` logger its level back (idempotent)."""
        if self.handler not in self._logger.handlers:
            return
        self._logger.removeHandler(self.handler)
        self._logger.setLevel(self._level)
        self.handler.close()


def metric_lines_reach_the_console() -> bool:
    """Return True when a console handler (``-v``) shows the INFO lines of :data:`METRICS_LOGGER`."""
    metrics = logging.getLogger(METRICS_LOGGER)
    if not metrics.isEnabledFor(logging.INFO):
        return False
    return any(
        getattr(handler, CONSOLE_HANDLER_MARK, False) and handler.level <= logging.INFO
        for handler in logging.getLogger().handlers
    )
