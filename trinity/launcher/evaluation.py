"""Evaluation of the current policy on the configured evaluation task sets."""

from __future__ import annotations

from typing import Any

from trinity.buffer import load_tasks
from trinity.common.config.schema import Config
from trinity.common.workflows.base import Task, rewards_of


def evaluate(config: Config, scheduler: Any, step: int) -> dict[str, float]:
    """Run every evaluation task set once and return ``<set>/reward/mean`` (and counts) for the monitor."""
    metrics: dict[str, float] = {}
    for task_set in config.buffer.eval_tasks:
        tasks = [Task.from_record(r, task_set, epoch=0, step=step, is_eval=True) for r in load_tasks(task_set)]
        if not tasks:
            continue
        result = scheduler.run(tasks)
        rewards = rewards_of(result.experiences)
        name = task_set.name
        metrics[f"{name}/reward/mean"] = sum(rewards) / len(rewards) if rewards else 0.0
        metrics[f"{name}/tasks"] = float(len(tasks))
        metrics[f"{name}/failed"] = float(len(result.failures))
    return metrics
