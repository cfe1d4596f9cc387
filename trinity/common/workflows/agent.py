"""Agent workflows: the agent talks to the model through an ``openai`` client; the engine records the traffic.

Write an agent as a subclass of :class:`AgentWorkflow` and implement
:meth:`AgentWorkflow.run_episode`: it gets a real ``openai.OpenAI`` client of
the rollout engine (and the name of the model to ask for), plays one episode
however it likes (tools, several turns, any agent library that takes an
OpenAI client) and returns the episode's :class:`Episode` (reward, metrics).
The workflow runs the task's ``repeat_times`` episodes at once, each on a
session of its own, so the engine batches their requests; then it turns each
episode's recorded requests into experiences:

* ``experience_mode: step`` (default): one experience per model call, each
  carrying the episode's reward (reward propagation), the steps of an
  episode sharing ``run_id`` in call order: what ``multi_step_grpo`` trains on.
* ``experience_mode: episode``: the calls that continue each other token for
  token become one experience with only the model's replies trained on
  (:func:`~trinity.common.workflows.history.episode_experiences`): for
  ``grpo``.

The config needs ``explorer.rollout_model.enable_openai_api: true`` and
``enable_history: true`` (and, for tools, ``enable_auto_tool_choice: true``
with a ``tool_call_parser``).

:class:`EnvironmentAgentWorkflow` runs a
:class:`~trinity.common.workflows.multi_turn.Environment` this way: the
environment's messages go to the model, its replies to the environment.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from trinity.common.experience import Experience
from trinity.common.models.client import EngineClient, RolloutModel
from trinity.common.models.engine import SamplingParams
from trinity.common.workflows.base import Task, Workflow, WorkflowError
from trinity.common.workflows.history import episode_experiences, experiences_from_records
from trinity.common.workflows.multi_turn import Environment

logger = logging.getLogger(__name__)

EXPERIENCE_MODES = ("step", "episode")


@dataclass
class Episode:
    """What one episode of an agent earned."""

    reward: float
    #: JSON-serialisable facts for the experiences' ``info`` (``metrics``: numbers the monitor averages).
    metrics: dict[str, Any] = field(default_factory=dict)


class AgentWorkflow(Workflow):
    """Base of agent workflows; see the module docstring."""

    #: True: :meth:`run_episode` gets an ``openai.AsyncOpenAI`` client (for agent libraries built on asyncio).
    uses_async_client: bool = False

    def __init__(self, sampling: SamplingParams | None = None, *, experience_mode: str = "step",
                 max_env_steps: int = 8) -> None:
        super().__init__(sampling)
        if experience_mode not in EXPERIENCE_MODES:
            raise WorkflowError(f"experience_mode must be one of {', '.join(EXPERIENCE_MODES)}, "
                                f"got {experience_mode!r}")
        if max_env_steps < 1:
            raise WorkflowError(f"max_env_steps must be at least 1, got {max_env_steps}")
        self.experience_mode = experience_mode
        self.max_env_steps = max_env_steps

    def run_episode(self, client: Any, model: str, task: Task, episode: int) -> Episode:
        """Play episode ``episode`` of ``task`` with ``client`` (``openai.OpenAI``, or ``AsyncOpenAI`` when
        :attr:`uses_async_client`) asking for ``model``."""
        raise NotImplementedError

    def request_options(self, task: Task) -> dict[str, Any]:
        """Return the sampling arguments of ``chat.completions.create`` for ``task`` (its sampling settings)."""
        params = self.sampling_for(task, n=1)
        options: dict[str, Any] = {"temperature": params.temperature, "top_p": params.top_p,
                                   "max_tokens": params.max_tokens}
        if params.stop:
            options["stop"] = list(params.stop)
        if params.top_k:
            options["extra_body"] = {"top_k": params.top_k}
        if params.seed is not None:
            options["seed"] = params.seed
        return options

    def run(self, engine: RolloutModel, task: Task) -> list[Experience]:
        """Run ``task.repeat_times`` episodes at once and return their experiences (see the module docstring)."""
        if not isinstance(engine, EngineClient):
            raise WorkflowError(f"{type(self).__name__} needs an engine client with an OpenAI API, "
                                f"got {type(engine).__name__}")
        sessions = [engine.fork() for _ in range(task.repeat_times)]
        with ThreadPoolExecutor(max_workers=task.repeat_times, thread_name_prefix="agent-episode") as pool:
            futures = [pool.submit(self._play, session, task, number) for number, session in enumerate(sessions)]
            episodes = [future.result() for future in futures]
        experiences: list[Experience] = []
        splits: list[tuple[int, int, int]] = []  # (episode, experiences, token of the first split)
        for number, (session, episode) in enumerate(zip(sessions, episodes, strict=True)):
            records = session.history()
            if self.experience_mode == "episode":
                made = episode_experiences(records)
                departed = [int(e.info["split_at"]) for e in made if "split_at" in e.info]
                if departed:
                    splits.append((number, len(made), departed[0]))
            else:
                made = experiences_from_records(records)
            for step, experience in enumerate(made):
                experience.reward = float(episode.reward)
                experience.group_id = task.group_id
                experience.run_id = number
                experience.info.update({"task_set": task.task_set, "task_index": task.index, "step": step,
                                        "steps": len(made), **episode.metrics})
            experiences += made
        if splits:
            number, pieces, token = splits[0]
            logger.warning(
                "task %s: %d of %d episode(s) split into several experiences; episode %d into %d, its turn departing "
                "from the episode's tokens at token %d (a chat template that rewrites earlier turns, messages changed "
                "between calls, or calls outside the episode's client)",
                task.index, len(splits), len(episodes), number, pieces, token,
            )
        return experiences

    def _play(self, session: EngineClient, task: Task, number: int) -> Episode:
        client = session.get_openai_async_client() if self.uses_async_client else session.get_openai_client()
        return self.run_episode(client, client.model_path, task, number)


class EnvironmentAgentWorkflow(AgentWorkflow):
    """Plays an :class:`~trinity.common.workflows.multi_turn.Environment` through the OpenAI client.

    The episode's reward is the sum of the environment's step rewards plus its
    ``finish()`` reward; at most ``max_env_steps`` replies.
    """

    def make_env(self, task: Task, episode: int) -> Environment:
        """Return a fresh environment for episode ``episode`` of ``task``."""
        raise NotImplementedError

    def run_episode(self, client: Any, model: str, task: Task, episode: int) -> Episode:
        """Alternate model replies and environment steps until the episode is done or the step limit."""
        env = self.make_env(task, episode)
        messages: list[dict[str, Any]] = [dict(m) for m in env.reset()]
        total, replies = 0.0, 0
        for _ in range(self.max_env_steps):
            response = client.chat.completions.create(model=model, messages=messages, **self.request_options(task))
            reply = response.choices[0].message.content or ""
            messages.append({"role": "assistant", "content": reply})
            replies += 1
            step = env.step(reply)
            total += step.reward
            if step.done or step.observation is None:
                break
            messages.append({"role": "user", "content": step.observation})
        total += env.finish()
        facts = dict(env.metrics())
        facts["metrics"] = {**dict(facts.get("metrics") or {}), "replies": float(replies)}
        return Episode(total, facts)
