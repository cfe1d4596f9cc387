"""Upstream Trinity-RFT's logger helper: ``get_logger(__name__)`` gives a logger whose lines reach the run's log.

trinity-rft configures logging once per command (the console, and the run's
log file); a logger from here is an ordinary :mod:`logging` logger under
that configuration, so workflow code written for upstream (``self.logger``,
``get_logger(__name__)``) logs as the rest of the run does.
"""

from __future__ import annotations

import logging


def get_logger(name: str | None = None, level: int | str | None = None, in_ray_actor: bool = False) -> logging.Logger:
    """Return the logger ``name`` (``trinity`` when None), at ``level`` when given; ``in_ray_actor`` is accepted."""
    logger = logging.getLogger(name or "trinity")
    if level is not None:
        logger.setLevel(level)
    return logger
