"""Environment variables every Ray worker of a run gets from the framework (besides the device's and plugins')."""

from __future__ import annotations

import os

#: Hugging Face's switch for its progress bars (transformers' "Loading weights", hub downloads).
PROGRESS_BARS_ENV = "HF_HUB_DISABLE_PROGRESS_BARS"


def quiet_worker_env() -> dict[str, str]:
    """Return the variables that keep workers' progress bars off the driver's console.

    Ray forwards every worker's output to the driver, where one bar per
    trainer rank and engine would break the run's live line. A user who set
    :data:`PROGRESS_BARS_ENV` keeps that choice.
    """
    return {} if PROGRESS_BARS_ENV in os.environ else {PROGRESS_BARS_ENV: "1"}
