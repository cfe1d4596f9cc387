"""Upstream Trinity-RFT's ``math_eval_workflow`` (and ``async_math_eval_workflow``: the same class).

Evaluation in the Qwen2.5-Math style: system "You are a helpful assistant.",
the question followed by "Please reason step by step, and put your final
answer within \\boxed{}.", sampled at temperature 0.6 and top-p 0.8
(workflow args ``temperature``, ``top_p``). Each reply's reward is 0, as
upstream; its correctness (:func:`~trinity.common.rewards.math_eval.verify_math_answer`)
is ``info["metrics"]["accuracy"]`` (absent when the task has no answer).
The question is the task's prompt (upstream reads the record's ``question``
field; set ``format.prompt_key: question`` for the same data).
"""

from __future__ import annotations

from trinity.common.models.engine import Completion, SamplingParams
from trinity.common.rewards.math_eval import verify_math_answer
from trinity.common.workflows.base import Task
from trinity.common.workflows.single_turn import Messages, SingleTurnWorkflow

#: Qwen2.5-Math's system prompt.
QWEN_SYSTEM_PROMPT = "You are a helpful assistant."
#: Appended to the question.
QWEN_BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def qwen_math_messages(question: object) -> Messages:
    """Return the Qwen2.5-Math evaluation conversation of ``question``."""
    return [{"role": "system", "content": QWEN_SYSTEM_PROMPT},
            {"role": "user", "content": f"{question}\n{QWEN_BOXED_INSTRUCTION}"}]


class MathEvalWorkflow(SingleTurnWorkflow):
    """Qwen2.5-Math style evaluation: reward 0, ``info["metrics"]["accuracy"]``; args ``temperature``, ``top_p``.

    The ``async_`` name is the same class (tasks already run concurrently).
    """

    def __init__(self, sampling: SamplingParams | None = None, *, temperature: float = 0.6, top_p: float = 0.8) -> None:
        super().__init__(sampling)
        self.temperature = float(temperature)
        self.top_p = float(top_p)

    def messages(self, task: Task) -> Messages:
        """Return the Qwen2.5-Math conversation of the task's question."""
        return qwen_math_messages(task.prompt)

    def reply_prefix(self, task: Task) -> str | None:
        """Return None: the evaluation prompt is fixed."""
        return None

    def sampling_of(self, task: Task) -> SamplingParams:
        """Return the task's sampling at this workflow's ``temperature`` and ``top_p``."""
        return self.sampling_for(task, temperature=self.temperature, top_p=self.top_p)

    def reward(self, task: Task, completion: Completion) -> tuple[float, dict[str, float]]:
        """Return reward 0 and ``{"accuracy": ...}`` (nothing when the task has no answer)."""
        if task.answer is None:
            return 0.0, {}
        return 0.0, {"accuracy": verify_math_answer(completion.text, task.answer)}
