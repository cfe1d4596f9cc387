"""Helpers shared by the monitor tests."""

from __future__ import annotations

from trinity.common.config.schema import MonitorConfig


def only(**flags: bool) -> MonitorConfig:
    """A MonitorConfig with every sink and the plot off except those named."""
    base = {"tensorboard": False, "jsonl": False, "plot": False, "progress": False, "wandb": False}
    base.update(flags)
    return MonitorConfig(**base)
