"""FrozenLake played by an agent through the ``openai`` client (``frozen_lake_agent``).

The game, its observations and rewards are ``frozen_lake_workflow``'s; the
difference is the way to the model: each move is a chat completion request
to the engine's OpenAI API, and the experiences come from the engine's
recorded history (:mod:`trinity.common.workflows.agent`), one per move
(``experience_mode: step``, for ``multi_step_grpo``) or one per episode.
"""

from __future__ import annotations

from trinity.common.models.engine import SamplingParams
from trinity.common.workflows.agent import EnvironmentAgentWorkflow
from trinity.common.workflows.base import Task
from trinity.common.workflows.frozen_lake import FrozenLakeWorkflow
from trinity.common.workflows.multi_turn import Environment


class FrozenLakeAgentWorkflow(EnvironmentAgentWorkflow):
    """FrozenLake through the OpenAI API; args as ``frozen_lake_workflow``'s plus ``experience_mode``."""

    def __init__(self, sampling: SamplingParams | None = None, *, experience_mode: str = "step",
                 env_max_steps: int = 8, agent_max_steps: int = 10, is_slippery: bool = False,
                 desc: list[str] | None = None) -> None:
        super().__init__(sampling, experience_mode=experience_mode, max_env_steps=agent_max_steps)
        self.lake = FrozenLakeWorkflow(sampling, env_max_steps=env_max_steps, agent_max_steps=agent_max_steps,
                                       is_slippery=is_slippery, desc=desc)

    def make_env(self, task: Task, episode: int) -> Environment:
        """Return a fresh episode of the task's map (``frozen_lake_workflow``'s)."""
        return self.lake.make_env(task, episode)
