"""Upstream Trinity-RFT's ``simple_workflow`` and ``math_workflow`` (and their ``async_`` names: the same classes).

``simple_workflow``: system prompt (the task set's ``format.system_prompt``,
when set), the task's prompt, the reply prefix (``format.reply_prefix``); each
of ``repeat_times`` replies is rewarded by the task set's reward function
(required) with its ``reward_fn_args``. A reward function returning named
parts (upstream's ``{"accuracy": ..., "format_score": ...}``) is rewarded
with their sum; the parts are the experience's ``info["metrics"]``.

``math_workflow``: the same with ``math_reward`` by default; with
``math_reward`` and no system prompt in the task set, DeepSeek-R1's system
prompt asking for ``<think>...</think> <answer>...</answer>``.
"""

from __future__ import annotations

from trinity.common.workflows.base import Task
from trinity.common.workflows.single_turn import SingleTurnWorkflow

#: ``math_workflow``'s system prompt (used with ``math_reward`` when the task set sets none).
R1_SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The assistant first thinks about the reasoning process in the mind and then provides the user with the "
    "answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, "
    "respectively, i.e.,\n<think> reasoning process here </think>\n<answer> answer here </answer>.\n"
)


class SimpleWorkflow(SingleTurnWorkflow):
    """``simple_workflow`` / ``async_simple_workflow``: one question, ``repeat_times`` rewarded answers.

    The task set must name a reward function (``default_reward_fn_type``);
    the ``async_`` name is the same class (tasks already run concurrently).
    """


class R1MathWorkflow(SingleTurnWorkflow):
    """``math_workflow`` / ``async_math_workflow``: math in DeepSeek-R1's think/answer format, ``math_reward``.

    The ``async_`` name is the same class (tasks already run concurrently).
    """

    default_reward_fn = "math_reward"

    def system_prompt(self, task: Task) -> str | None:
        """Return the task set's system prompt; with ``math_reward`` and none set, :data:`R1_SYSTEM_PROMPT`."""
        if task.system_prompt is None and self.reward_fn_of(task) == "math_reward":
            return R1_SYSTEM_PROMPT
        return task.system_prompt
