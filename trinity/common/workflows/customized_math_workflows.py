"""Upstream Trinity-RFT's ``MathBoxedWorkflow`` in upstream's shape, at upstream's import path, for subclassing.

Answers in ``\\boxed{}``: ``math_boxed_reward`` unless the task set names a
reward; workflow args ``with_think``, ``format_score_coef`` (passed to the
reward) and ``use_base`` (a plain-text prompt for a base model instead of the
chat template). The config name ``math_boxed_workflow`` runs trinity-rft's
own class (:mod:`trinity.common.workflows.math_boxed`), which scores the same.
"""

from __future__ import annotations

from trinity.common.experience import Experience
from trinity.common.workflows.base import Task
from trinity.common.workflows.math_boxed import BOXED_PROMPT, BOXED_THINK_PROMPT, base_model_prompt
from trinity.common.workflows.workflow import SimpleWorkflow


class MathBoxedWorkflow(SimpleWorkflow):
    """Math answered in ``\\boxed{}`` (upstream's ``math_boxed_workflow`` shape)."""

    def reset(self, task: Task) -> None:
        """Read the task and the workflow args; default the reward and the system prompt."""
        from trinity.common.rewards.reward_fn import reward_class

        if task.reward_fn is None:
            task.reward_fn = reward_class("math_boxed_reward")  # type: ignore[assignment]
        super().reset(task)
        self.use_base = bool(self.workflow_args.get("use_base", False))
        self.with_think = bool(self.workflow_args.get("with_think", False))
        self.format_score_coef = float(self.workflow_args.get("format_score_coef", 0.1))
        if self.system_prompt is None:
            self.system_prompt = BOXED_THINK_PROMPT if self.with_think else BOXED_PROMPT

    def format_prompt(self) -> str:
        """Return the plain-text prompt of ``use_base``."""
        return base_model_prompt(self.system_prompt, str(self.task_desc))

    def run(self) -> list[Experience]:  # type: ignore[override]  # upstream's shape: run(self)
        """Ask (chat, or plain text with ``use_base``) and reward each reply with ``math_boxed_reward``."""
        if self.use_base:
            replies = self.model.generate([self.format_prompt()], **self.rollout_args)
        else:
            replies = self.model.chat(self.format_messages(), **self.rollout_args)
        return self.score(replies, with_think=self.with_think, format_score_coef=self.format_score_coef)


__all__ = ["MathBoxedWorkflow", "Task"]
