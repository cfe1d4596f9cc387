"""Upstream Trinity-RFT's ``math_boxed_workflow`` (and ``async_math_boxed_workflow``: the same class).

Math answered in ``\\boxed{}``, rewarded by ``math_boxed_reward`` by default.
Workflow args, as upstream:

* ``with_think`` (False): ask for ``<think>...</think>`` first (another default
  system prompt) and take ``format_score_coef`` off replies whose think tags
  are not one ordered pair;
* ``format_score_coef`` (0.1): that penalty;
* ``use_base`` (False): prompt a base model with plain text
  (``System:...\\nUser:\\n<question>\\nAssistant:\\n``) instead of the chat template.

The task set's system prompt wins over the defaults. ``with_think`` and
``format_score_coef`` reach the reward function as context (its
``reward_fn_args`` of the same name win).
"""

from __future__ import annotations

from typing import Any

from trinity.common.models.client import RolloutModel
from trinity.common.models.engine import Completion, SamplingParams
from trinity.common.workflows.base import Task
from trinity.common.workflows.single_turn import SingleTurnWorkflow, checked

#: System prompt without ``with_think``.
BOXED_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
#: System prompt with ``with_think``.
BOXED_THINK_PROMPT = (
    "You are a helpful assistant that solves MATH problems. You should first thinks about the reasoning process "
    "in mind and then provides the user with the answer. You should present your reasoning process using the "
    "format: <think>\n ...your reasoning process here... </think>\n first. You should always include your final "
    "answer in \\boxed{} as closed-form results."
)


def base_model_prompt(system_prompt: str | None, question: str) -> str:
    """Return the plain-text prompt of ``use_base``: ``System:...`` (when any), the question, ``Assistant:``."""
    head = f"System:{system_prompt}\n" if system_prompt else ""
    return f"{head}User:\n{question}\nAssistant:\n"


class MathBoxedWorkflow(SingleTurnWorkflow):
    """Boxed-answer math with ``math_boxed_reward``; workflow args ``with_think``, ``format_score_coef``, ``use_base``.

    The ``async_`` name is the same class (tasks already run concurrently).
    """

    default_reward_fn = "math_boxed_reward"

    def __init__(
        self,
        sampling: SamplingParams | None = None,
        *,
        with_think: bool = False,
        format_score_coef: float = 0.1,
        use_base: bool = False,
    ) -> None:
        super().__init__(sampling)
        self.with_think = bool(with_think)
        self.format_score_coef = float(format_score_coef)
        self.use_base = bool(use_base)

    def system_prompt(self, task: Task) -> str | None:
        """Return the task set's system prompt, else the default for ``with_think``."""
        if task.system_prompt is not None:
            return task.system_prompt
        return BOXED_THINK_PROMPT if self.with_think else BOXED_PROMPT

    def sample(self, engine: RolloutModel, task: Task) -> list[Completion]:
        """Return the ``repeat_times`` completions: chat, or a plain-text prompt with ``use_base``."""
        if not self.use_base:
            return super().sample(engine, task)
        params = self.sampling_of(task)
        prompt = base_model_prompt(self.system_prompt(task), str(task.prompt))
        return checked(engine.generate([prompt], params)[0], params.n)

    def reward_context(self, task: Task, completion: Completion) -> dict[str, Any]:
        """Return the base context plus ``with_think`` and ``format_score_coef``."""
        return {**super().reward_context(task, completion), "with_think": self.with_think,
                "format_score_coef": self.format_score_coef}
