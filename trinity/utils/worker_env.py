"""Environment variables every Ray worker of a run gets from the framework (besides the device's and plugins')."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

#: Hugging Face's switch for its progress bars (transformers' "Loading weights", hub downloads).
PROGRESS_BARS_ENV = "HF_HUB_DISABLE_PROGRESS_BARS"


def quiet_worker_env() -> dict[str, str]:
    """Return the variables that keep workers' progress bars off the driver's console.

    Ray forwards every worker's output to the driver, where one bar per
    trainer rank and engine would break the run's live line. A user who set
    :data:`PROGRESS_BARS_ENV` keeps that choice.
    """
    return {} if PROGRESS_BARS_ENV in os.environ else {PROGRESS_BARS_ENV: "1"}


@contextmanager
def hf_progress_bars_off() -> Iterator[None]:
    """Keep transformers' progress bars ("Writing model shards", ...) off the console inside the block.

    For work the driver does while a run's live line owns the terminal (the
    final Hugging Face export); the previous setting comes back afterwards.
    """
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]
