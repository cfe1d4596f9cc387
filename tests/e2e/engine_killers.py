"""Workflows that kill their rollout engine's process mid-run, as a crashing engine would die.

They run in the driver (the scheduler's runner threads) and reach the engine
actor through the client they are given; ``SERVED`` records which engine
process served each task, so a test sees a fresh process take a dead one's place.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading

import ray

from trinity.common.experience import Experience
from trinity.common.models.client import EngineClient, RolloutModel
from trinity.common.workflows import Task
from trinity.common.workflows.toy import ToyRepeatWorkflow

#: ``(explorer step, engine index, engine pid, engine weights version)`` of every task attempt.
SERVED: list[tuple[int, int, int, int]] = []
#: Pids of the engine processes killed.
KILLED: list[int] = []
_LOCK = threading.Lock()
#: Explorer step (0-based) whose first task on engine 0 kills that engine.
KILL_AT_STEP = 1


def engine_pid(engine: EngineClient) -> int:
    """Return the pid of the process of the engine actor behind ``engine``."""
    return int(ray.get(engine.engine.__ray_call__.remote(lambda actor: os.getpid()), timeout=30))


class KillsItsEngine(ToyRepeatWorkflow):
    """``toy_repeat``; the first task of step ``KILL_AT_STEP`` on engine 0 SIGKILLs that engine's process first."""

    def run(self, engine: RolloutModel, task: Task) -> list[Experience]:
        assert isinstance(engine, EngineClient)
        pid = engine_pid(engine)
        version = engine.model_version()
        with _LOCK:
            SERVED.append((task.step, engine.index, pid, version))
            kill = task.step == KILL_AT_STEP and engine.index == 0 and not KILLED
            if kill:
                KILLED.append(pid)
        if kill:
            self.before_kill(engine)
            os.kill(pid, signal.SIGKILL)
        return super().run(engine, task)  # the dead engine's calls fail: the scheduler retries elsewhere

    def before_kill(self, engine: EngineClient) -> None:
        """Called just before the kill."""


class KillsItsEngineAndModel(KillsItsEngine):
    """As :class:`KillsItsEngine`, and moves the model folder away first: no fresh engine can load it."""

    def before_kill(self, engine: EngineClient) -> None:
        folder = str(engine.call("describe")["model_path"]).rstrip("/")
        shutil.move(folder, folder + ".gone")
