"""Upstream Trinity-RFT's single-turn workflow classes in upstream's shape, at upstream's import path.

Upstream users subclass these (``class MyWorkflow(SimpleWorkflow)``) and
override ``reset``, ``format_messages`` or ``run``: the built with
``(task=..., model=..., auxiliary_models=...)`` shape, run by
:class:`~trinity.common.workflows.upstream.UpstreamWorkflowRunner`.

* :class:`SimpleWorkflow`: ``reset(task)`` reads the task (``format_args``,
  ``system_prompt``, ``reply_prefix``, ``raw_task``, ``task_desc``, ``truth``,
  ``reward_fn_args``) and builds ``self.reward_fn`` from the task's reward
  class; ``format_messages()`` is the system prompt, the question and the
  reply prefix; ``run()`` chats ``n`` replies with ``self.rollout_args`` and
  rewards each with the sum of the reward's parts (the parts its metrics).
* :class:`MathWorkflow`: ``math_reward`` by default, with DeepSeek-R1's
  system prompt when the task set gives none.

The config names ``simple_workflow`` and ``math_workflow`` run trinity-rft's
own classes (:mod:`trinity.common.workflows.simple`), which score the same;
these are for subclassing.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from trinity.common.experience import Experience
from trinity.common.workflows.base import Task, Workflow, WorkflowError
from trinity.common.workflows.simple import R1_SYSTEM_PROMPT


def reward_parts(result: Any) -> dict[str, float]:
    """Return a reward's result as named parts (a bare number is the part ``reward``)."""
    if isinstance(result, dict):
        return {str(k): float(v) for k, v in result.items()}
    return {"reward": float(result)}


class BaseSimpleWorkflow(Workflow):
    """What upstream's simple workflows share: the task read by ``reset``, the messages, the rollout args."""

    can_reset: bool = True
    can_repeat: bool = True

    def __init__(self, *, task: Task, model: Any, auxiliary_models: list[Any] | None = None) -> None:
        self.run_id_base = 0
        self.reset(task)
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)

    def reset(self, task: Task) -> None:
        """Read ``task``: prompts, reference answer, reward arguments, and build ``self.reward_fn``."""
        self.task = task
        self.format_args = task.format_args
        self.system_prompt = task.format_args.system_prompt if task.format_args is not None else None
        self.reply_prefix = task.format_args.reply_prefix if task.format_args is not None else None
        self.reward_fn_args = dict(task.reward_fn_args or {})
        self.workflow_args = dict(task.workflow_args or {})
        self.raw_task = task.raw_task
        self.task_desc = task.task_desc
        self.truth = task.truth
        reward = task.reward_fn
        if not isinstance(reward, type):
            raise WorkflowError(f"{type(self).__name__} needs a reward function: set the task set's "
                                "default_reward_fn_type (or reward_fn)")
        self.reward_fn: Any = reward(**self.reward_fn_args)

    def set_repeat_times(self, repeat_times: int, run_id_base: int) -> None:
        """Make all ``repeat_times`` replies in one ``run``, numbered from ``run_id_base``."""
        self.repeat_times = repeat_times
        self.run_id_base = run_id_base
        if self.task is not None and self.task.rollout_args is not None:
            self.task.rollout_args.n = repeat_times

    @property
    def rollout_args(self) -> dict[str, Any]:
        """The task's generation settings as keyword arguments of ``self.model.chat``."""
        args = self.task.rollout_args if self.task is not None else None
        return dataclasses.asdict(args) if dataclasses.is_dataclass(args) and not isinstance(args, type) else {}

    def format_messages(self) -> list[dict[str, str]]:
        """Return the conversation: the system prompt (when any), the question, the reply prefix (when any)."""
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        messages.append({"role": "user", "content": str(self.task_desc)})
        if self.reply_prefix:
            messages.append({"role": "assistant", "content": self.reply_prefix})
        return messages

    def score(self, replies: list[Experience], **reward_kwargs: Any) -> list[Experience]:
        """Reward each reply with the sum of ``self.reward_fn``'s parts (kept in its metrics); number the runs."""
        for number, reply in enumerate(replies):
            parts = reward_parts(self.reward_fn(response=reply.response_text, truth=self.truth, **reward_kwargs))
            reply.metrics.update(parts)
            reply.reward = sum(parts.values())
            if reply.eid is not None:
                reply.eid.run = number + self.run_id_base
        return replies


class SimpleWorkflow(BaseSimpleWorkflow):
    """One question, ``n`` rewarded replies (upstream's ``simple_workflow`` shape)."""

    def run(self) -> list[Experience]:  # type: ignore[override]  # upstream's shape: run(self)
        """Chat the replies and reward each."""
        return self.score(self.model.chat(self.format_messages(), **self.rollout_args))


class AsyncSimpleWorkflow(BaseSimpleWorkflow):
    """:class:`SimpleWorkflow`, awaitable."""

    is_async: bool = True

    async def run_async(self) -> list[Experience]:
        """Chat the replies and reward each."""
        return self.score(await self.model.chat_async(self.format_messages(), **self.rollout_args))


class MathWorkflow(SimpleWorkflow):
    """Math in DeepSeek-R1's think/answer format: ``math_reward`` unless the task set names a reward."""

    def reset(self, task: Task) -> None:
        """Default the reward to ``math_reward`` and, with it and no system prompt, use DeepSeek-R1's."""
        from trinity.common.rewards.reward_fn import reward_class

        math_reward = reward_class("math_reward")
        if task.reward_fn is None:
            task.reward_fn = math_reward  # type: ignore[assignment]
        asks_math = cast(Any, task.reward_fn) is math_reward
        if asks_math and task.format_args is not None and task.format_args.system_prompt is None:
            task.format_args = dataclasses.replace(task.format_args, system_prompt=R1_SYSTEM_PROMPT)
        super().reset(task)


class AsyncMathWorkflow(AsyncSimpleWorkflow, MathWorkflow):
    """:class:`MathWorkflow`, awaitable."""


__all__ = ["AsyncMathWorkflow", "AsyncSimpleWorkflow", "BaseSimpleWorkflow", "MathWorkflow", "SimpleWorkflow",
           "Task", "Workflow"]
