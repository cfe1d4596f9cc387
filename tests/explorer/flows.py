"""Workflows for the scheduler tests: record where they ran, fail or stall on chosen attempts."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import torch

from trinity.common.experience import Experience
from trinity.common.models.client import RolloutModel
from trinity.common.models.engine import SamplingParams
from trinity.common.workflows import WORKFLOWS, Task, Workflow

#: Attempts seen per (test key, task index).
ATTEMPTS: dict[tuple[str, int], int] = {}
#: What the abandoned attempts ran into when they called their engine afterwards.
LATE_ERRORS: list[str] = []
_LOCK = threading.Lock()
_RUNNING = {"now": 0, "max": 0}


def attempt_number(key: str, index: int) -> int:
    """Count and return this attempt of task ``index`` (1 for the first)."""
    with _LOCK:
        ATTEMPTS[(key, index)] = ATTEMPTS.get((key, index), 0) + 1
        return ATTEMPTS[(key, index)]


def max_concurrency() -> int:
    return _RUNNING["max"]


class Probe(Workflow):
    """Calls the engine once, then (by its args) sleeps, fails or stalls; records the engine it ran on.

    Args: ``key`` (attempt counter namespace), ``fail_attempts`` (first N attempts raise; -1 always),
    ``stall_attempts`` (first N attempts sleep ``stall_s`` then call the engine again; -1 always),
    ``work_s`` (sleep while running, to overlap tasks).
    """

    def __init__(self, sampling: SamplingParams | None = None, *, key: str = "", fail_attempts: int = 0,
                 stall_attempts: int = 0, stall_s: float = 0.0, work_s: float = 0.0, kill_engine_at: int = -1
                 ) -> None:
        super().__init__(sampling)
        self.key, self.fail_attempts, self.stall_attempts = key, fail_attempts, stall_attempts
        self.stall_s, self.work_s = stall_s, work_s
        self.kill_engine_at = kill_engine_at

    def run(self, engine: RolloutModel, task: Task) -> list[Experience]:
        attempt = attempt_number(self.key, task.index)
        if task.index == self.kill_engine_at and attempt == 1:  # its engine's process dies, as a crash would
            os.kill(int(engine.call("pid")), signal.SIGKILL)  # type: ignore[attr-defined]
        with _LOCK:
            _RUNNING["now"] += 1
            _RUNNING["max"] = max(_RUNNING["max"], _RUNNING["now"])
        try:
            version = engine.model_version()
            time.sleep(self.work_s)
            if self.fail_attempts < 0 or attempt <= self.fail_attempts:
                raise ValueError(f"boom on attempt {attempt}")
            if self.stall_attempts < 0 or attempt <= self.stall_attempts:
                time.sleep(self.stall_s)
                try:
                    engine.model_version()
                except Exception as exc:
                    LATE_ERRORS.append(type(exc).__name__)
                    raise
            return [
                Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=2, reward=float(task.index),
                           group_id=task.group_id, run_id=i, model_version=version,
                           info={"engine": getattr(engine, "index", -1), "attempt": attempt,
                                 "task_index": task.index})
                for i in range(task.repeat_times)
            ]
        finally:
            with _LOCK:
                _RUNNING["now"] -= 1


WORKFLOWS.add("test_probe", Probe)


def probe_tasks(n: int, key: str, repeat_times: int = 1, **args: Any) -> list[Task]:
    return [Task(prompt=f"p{i}", index=i, workflow="test_probe", repeat_times=repeat_times,
                 workflow_args={"key": key, **args}) for i in range(n)]
