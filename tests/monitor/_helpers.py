"""Helpers shared by the monitor tests."""

from __future__ import annotations

from typing import Any

from trinity.common.config.plan.run import MonitorPlan


def only(*, tensorboard: bool = False, wandb: bool = False, jsonl: bool = False, plot: bool = False,
         progress: bool = False, monitor_args: dict[str, Any] | None = None) -> MonitorPlan:
    """A MonitorPlan with every sink and the plot off except those named.

    ``tensorboard`` / ``wandb`` choose ``monitor_type`` (upstream's schema has one monitor
    type, so at most one of them); neither gives ``monitor_type: none``.
    """
    assert not (tensorboard and wandb), "monitor.monitor_type is one of tensorboard, wandb, none"
    monitor_type = "tensorboard" if tensorboard else "wandb" if wandb else "none"
    return MonitorPlan(monitor_type=monitor_type, monitor_args=dict(monitor_args or {}), detailed_stats=False,
                       enable_ray_timeline=False, jsonl=jsonl, plot=plot, progress=progress)
