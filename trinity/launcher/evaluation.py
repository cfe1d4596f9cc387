"""Evaluation of the current policy on the run's evaluation task sets."""

from __future__ import annotations

import statistics
from typing import Any

from trinity.buffer import load_tasks
from trinity.common.config.plan.run import RunPlan
from trinity.common.workflows.base import Task, rewards_of


def evaluate(plan: RunPlan, scheduler: Any, step: int) -> dict[str, float]:
    """Run every evaluation task set once and return ``<set>/reward/mean`` (and counts) for the monitor.

    With ``monitor.detailed_stats`` the std, max and min of the rewards are reported too.
    """
    metrics: dict[str, float] = {}
    for task_set in plan.buffer.eval_tasksets:
        tasks = [Task.from_record(r, task_set, epoch=0, step=step) for r in load_tasks(task_set)]
        if not tasks:
            continue
        result = scheduler.run(tasks)
        rewards = rewards_of(result.experiences)
        name = task_set.name
        metrics[f"{name}/reward/mean"] = sum(rewards) / len(rewards) if rewards else 0.0
        if plan.monitor.detailed_stats and rewards:
            metrics[f"{name}/reward/std"] = statistics.pstdev(rewards)
            metrics[f"{name}/reward/max"] = max(rewards)
            metrics[f"{name}/reward/min"] = min(rewards)
        metrics[f"{name}/tasks"] = float(len(tasks))
        metrics[f"{name}/failed"] = float(len(result.failures))
        metrics.update({f"{name}/{key}/mean": value for key, value in workflow_metrics(result.experiences).items()})
    return metrics


def workflow_metrics(experiences: Any) -> dict[str, float]:
    """Return the mean of each numeric metric workflows put in ``info["metrics"]`` (e.g. ``accuracy``)."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for experience in experiences:
        for key, value in (experience.info.get("metrics") or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                sums[key] = sums.get(key, 0.0) + float(value)
                counts[key] = counts.get(key, 0) + 1
    return {key: sums[key] / counts[key] for key in sums}
