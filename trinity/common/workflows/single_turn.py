"""Single-turn workflows: one prompt, ``repeat_times`` sampled replies, each rewarded.

:class:`SingleTurnWorkflow` is the base of upstream Trinity-RFT's simple
workflows here (``simple_workflow``, ``math_workflow``, ``math_boxed_workflow``,
``math_eval_workflow``, ``tool_call_workflow``, the distillation workflows).
A subclass says what to ask (:meth:`~SingleTurnWorkflow.messages`) and how to
reward a reply (:meth:`~SingleTurnWorkflow.reward`); the base samples, checks
the engine's answer and builds the experiences (prompt tokens from the chat
template, response tokens, behaviour log-probs, reward, ``group_id``,
``run_id`` 0..n-1, ``info["metrics"]``: the reward's named parts, as
upstream's experience metrics).

The prompt is the conversation under the chat template with a generation
prompt. With a reply prefix (the task set's ``format.reply_prefix``) the
prefix follows the generation prompt, so the reply continues it; the
response (and what is rewarded) is the continuation only, as upstream.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trinity.common.experience import Experience
from trinity.common.models.client import RolloutModel
from trinity.common.models.engine import Completion, SamplingParams
from trinity.common.rewards import compute_reward
from trinity.common.workflows.base import Task, Workflow, WorkflowError, experience_from_completion

Messages = list[dict[str, str]]


def simple_messages(system_prompt: str | None, prompt: Any) -> Messages:
    """Return ``[system (when given), user: prompt]``."""
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": str(prompt)})
    return messages


def prefixed_prompt_ids(
    engine: RolloutModel, task: Task, messages: Sequence[Mapping[str, str]], prefix: str
) -> list[int]:
    """Return the token ids of ``messages`` under the chat template, the generation prompt, then ``prefix``.

    The template is the task set's (``format.chat_template``: the model's
    custom template when set), else the tokenizer's.
    """
    template = task.format.chat_template if task.format is not None else None
    text = engine.tokenizer.apply_chat_template(
        [dict(m) for m in messages], add_generation_prompt=True, tokenize=False, chat_template=template
    )
    return list(engine.tokenizer(str(text) + prefix, add_special_tokens=False)["input_ids"])


def sample_replies(
    engine: RolloutModel, task: Task, messages: Sequence[Mapping[str, str]], params: SamplingParams,
    reply_prefix: str | None = None,
) -> list[Completion]:
    """Return ``params.n`` completions of the chat ``messages`` (continuing ``reply_prefix`` when given).

    Raises WorkflowError when the engine returns another number of completions.
    """
    if reply_prefix:
        completions = engine.generate_tokens([prefixed_prompt_ids(engine, task, messages, reply_prefix)], params)[0]
    else:
        completions = engine.chat([list(messages)], params)[0]
    return checked(completions, params.n)


def checked(completions: list[Completion], expected: int) -> list[Completion]:
    """Return ``completions``; raises WorkflowError unless there are ``expected`` of them."""
    if len(completions) != expected:
        raise WorkflowError(f"engine returned {len(completions)} completions, {expected} were asked")
    return completions


def metrics_of(parts: Mapping[str, float]) -> dict[str, float]:
    """Return upstream-style metrics of reward ``parts``: named parts by their own name, else each function's value."""
    named = {key.split("/", 1)[1]: value for key, value in parts.items() if "/" in key}
    return named or dict(parts)


class SingleTurnWorkflow(Workflow):
    """Ask once, sample ``repeat_times`` replies, reward each; subclasses set :meth:`messages` and :meth:`reward`."""

    def first_auxiliary(self, role: str) -> RolloutModel:
        """Return the first auxiliary model, which this workflow uses as its ``role`` (judge, teacher); raises
        WorkflowError when the run has none."""
        if not self.auxiliary_models:
            raise WorkflowError(
                f"{type(self).__name__} needs a {role} model: add one under explorer.auxiliary_models "
                f"(the first is the {role})"
            )
        model: RolloutModel = self.auxiliary_models[0]
        return model

    def system_prompt(self, task: Task) -> str | None:
        """Return the system prompt of ``task``: the task set's (``format.system_prompt[_key]``), or None."""
        return task.system_prompt

    def messages(self, task: Task) -> Messages:
        """Return the conversation to answer: the system prompt (when any) and the task's prompt."""
        return simple_messages(self.system_prompt(task), task.prompt)

    def reply_prefix(self, task: Task) -> str | None:
        """Return the text the reply starts with (the task set's ``format.reply_prefix``), or None."""
        return task.reply_prefix

    def sampling_of(self, task: Task) -> SamplingParams:
        """Return the sampling of ``task`` (defaults, the task's overrides, ``n = repeat_times``)."""
        return self.sampling_for(task)

    def sample(self, engine: RolloutModel, task: Task) -> list[Completion]:
        """Return the ``repeat_times`` completions of ``task``."""
        return sample_replies(engine, task, self.messages(task), self.sampling_of(task), self.reply_prefix(task))

    def reward_context(self, task: Task, completion: Completion) -> dict[str, Any]:
        """Return the keyword context reward functions get: the prompt and the response length in tokens."""
        return {"prompt": str(task.prompt), "response_length": len(completion.response_tokens)}

    def reward(self, task: Task, completion: Completion) -> tuple[float, dict[str, float]]:
        """Return the reward of ``completion`` and its parts: the task's reward function with its ``reward_fn_args``."""
        return compute_reward(
            self.reward_fn_of(task), completion.text, task.answer,
            options=task.reward_fn_args, **self.reward_context(task, completion),
        )

    def run(self, engine: RolloutModel, task: Task) -> list[Experience]:
        """Sample ``task.repeat_times`` replies and reward each."""
        experiences = []
        for run_id, completion in enumerate(self.sample(engine, task)):
            reward, parts = self.reward(task, completion)
            info = {"reward_parts": parts, "metrics": metrics_of(parts)}
            experiences.append(experience_from_completion(task, completion, run_id, reward, info))
        return experiences
