"""The ``math`` workflow: a chat prompt, ``repeat_times`` sampled answers, each checked against the reference."""

from __future__ import annotations

from typing import Any

from trinity.common.experience import Experience
from trinity.common.models.client import RolloutModel
from trinity.common.models.engine import SamplingParams
from trinity.common.rewards import compute_reward
from trinity.common.workflows.base import Task, Workflow, WorkflowError, experience_from_completion

DEFAULT_SYSTEM_PROMPT = (
    "Solve the problem step by step. Put the final answer in \\boxed{} or end with 'The answer is X'."
)


class MathWorkflow(Workflow):
    """Question in, ``repeat_times`` completions out, rewarded by the reward function (``math_accuracy``).

    Workflow args: ``system_prompt`` (None or "" for none), ``format_weight``
    (adds ``format_weight * format`` reward: the answer is stated explicitly).
    """

    default_reward_fn = "math_accuracy"

    def __init__(
        self,
        sampling: SamplingParams | None = None,
        *,
        system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
        format_weight: float = 0.0,
    ) -> None:
        super().__init__(sampling)
        self.system_prompt = system_prompt
        self.format_weight = float(format_weight)

    def messages(self, task: Task) -> list[dict[str, str]]:
        """Return the chat conversation of ``task``."""
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        messages.append({"role": "user", "content": str(task.prompt)})
        return messages

    def reward_spec(self, task: Task) -> dict[str, float]:
        """Return ``{reward function: weight}`` for ``task``."""
        spec = {self.reward_fn_of(task): 1.0}
        if self.format_weight:
            spec["format"] = spec.get("format", 0.0) + self.format_weight
        return spec

    def run(self, engine: RolloutModel, task: Task) -> list[Experience]:
        """Sample ``task.repeat_times`` answers to the question and reward each."""
        completions = engine.chat([self.messages(task)], self.sampling_for(task))[0]
        if len(completions) != task.repeat_times:
            raise WorkflowError(f"engine returned {len(completions)} completions, {task.repeat_times} were asked")
        spec = self.reward_spec(task)
        experiences = []
        for run_id, completion in enumerate(completions):
            reward, parts = compute_reward(spec, completion.text, task.answer, prompt=str(task.prompt))
            info: dict[str, Any] = {"reward_parts": parts}
            experiences.append(experience_from_completion(task, completion, run_id, reward, info))
        return experiences
