"""Upstream Trinity-RFT's ``simple_mm_workflow`` (and ``async_simple_mm_workflow``, the same class): a question
about images, ``repeat_times`` rewarded answers, for a vision-language model.

The record's images are under the task set's ``format.image_key`` (one image
or a list: PIL images, file paths, bytes, or Hugging Face datasets' image
records). ``<image>`` tags in the prompt place the images in the user turn,
in order; images beyond the tags come first, as upstream places them. The
system prompt asks for reasoning and a ``\\boxed{}`` answer, upstream's; the
task set's reward function (upstream's recipes: ``math_boxed_reward``) scores
each reply. Each experience keeps its prompt's image inputs, which the
trainer runs with the prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trinity.common.models.engine import SamplingParams
from trinity.common.models.vision import image_user_turn, record_images
from trinity.common.workflows.base import Task, WorkflowError
from trinity.common.workflows.single_turn import Messages, SingleTurnWorkflow

#: Upstream's system prompt of ``simple_mm_workflow``.
MM_SYSTEM_PROMPT = (
    "You are a helpful assistant that solves MATH problems. You should first think about the reasoning process "
    "in mind and then provide the user with the answer. You should present your reasoning process using the "
    "format: <think>\n ...your reasoning process here... </think>\n first. You should always include your final "
    "answer in \\boxed{} as closed-form results."
)


def image_message(prompt: str, images: Sequence[Any]) -> dict[str, Any]:
    """The user turn of ``prompt`` with ``images``: each ``<image>`` tag becomes the next image, the rest go first.

    Raises WorkflowError when the prompt has more tags than images.
    """
    try:
        return image_user_turn(prompt, images)
    except ValueError as exc:
        raise WorkflowError(str(exc)) from None


def task_images(task: Task) -> list[Any]:
    """The images of ``task``'s record under its format's ``image_key`` (none without the key)."""
    key = task.format.image_key if task.format is not None else None
    return record_images(task.raw.get(key)) if key else []


class SimpleMMWorkflow(SingleTurnWorkflow):
    """``simple_mm_workflow`` / ``async_simple_mm_workflow``: images and a question, ``repeat_times`` answers.

    The task set must name a reward function (``default_reward_fn_type``).
    """

    def __init__(self, sampling: SamplingParams | None = None, *, with_think: bool = True, **kwargs: Any) -> None:
        """``with_think`` (a workflow arg upstream's ``mix_vlm`` recipe passes) is accepted as upstream accepts
        it: the system prompt asks for reasoning either way."""
        super().__init__(sampling, **kwargs)
        self.with_think = with_think

    def system_prompt(self, task: Task) -> str | None:
        """Return the task set's system prompt, else upstream's (reason, then a ``\\boxed{}`` answer)."""
        return task.system_prompt if task.system_prompt is not None else MM_SYSTEM_PROMPT

    def reply_prefix(self, task: Task) -> str | None:
        """No reply prefix: a prompt with images is rendered whole by the engine."""
        if task.reply_prefix:
            raise WorkflowError("simple_mm_workflow does not take format.reply_prefix; remove it")
        return None

    def messages(self, task: Task) -> Messages:
        """Return the system prompt and the user turn with the record's images."""
        system = self.system_prompt(task)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        messages.append(image_message(str(task.prompt), task_images(task)))
        return messages  # type: ignore[return-value]
