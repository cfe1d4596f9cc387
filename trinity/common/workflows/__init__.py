"""Workflows: how a task becomes experiences. Registered by name in :data:`WORKFLOWS`.

Built in: ``math`` (answer checking), ``toy_repeat`` (a task a tiny model
learns on a CPU), ``guess_number`` (multi-turn example). Importing this
package registers them (and the reward functions).
"""

from trinity.common.workflows.base import (
    WORKFLOWS,
    Task,
    Workflow,
    WorkflowError,
    experience_from_completion,
    make_workflow,
    sampling_from_model,
)
from trinity.common.workflows.guess_number import GuessNumberEnv, GuessNumberWorkflow
from trinity.common.workflows.math import MathWorkflow
from trinity.common.workflows.multi_turn import Environment, EnvStep, MultiTurnWorkflow, env_token_ids
from trinity.common.workflows.toy import ToyRepeatWorkflow, toy_tasks, write_quickstart_tasks, write_toy_tasks

__all__ = [
    "WORKFLOWS",
    "EnvStep",
    "Environment",
    "GuessNumberEnv",
    "GuessNumberWorkflow",
    "MathWorkflow",
    "MultiTurnWorkflow",
    "Task",
    "ToyRepeatWorkflow",
    "Workflow",
    "WorkflowError",
    "env_token_ids",
    "experience_from_completion",
    "make_workflow",
    "sampling_from_model",
    "toy_tasks",
    "write_quickstart_tasks",
    "write_toy_tasks",
]
