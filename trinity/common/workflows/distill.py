"""Upstream Trinity-RFT's on-policy distillation workflows: ``on_policy_distill_workflow``, ``..._math_workflow``.

The student (the rollout model) samples ``repeat_times`` replies; the teacher,
the first auxiliary model (``explorer.auxiliary_models[0]``), scores the very
same tokens (:meth:`~trinity.common.models.client.RolloutModel.score_tokens`
at the workflow arg ``temperature``, default 1.0). Each experience carries
``teacher_logprobs`` (one per response token) for the distillation advantage
(``teacher_logprobs - logprobs``) and ``info["metrics"]["kl_divergence"]``:
the sum over the response of student minus teacher log-probs.

``on_policy_distill_workflow`` asks like ``simple_workflow`` (system prompt,
prompt, reply prefix) and rewards 0; ``on_policy_distill_math_workflow`` asks
in the Qwen2.5-Math style (as ``math_eval_workflow``) and rewards the
correctness of the answer (also ``info["metrics"]["accuracy"]``).
"""

from __future__ import annotations

import dataclasses

from trinity.common.experience import Experience
from trinity.common.models.client import RolloutModel
from trinity.common.models.engine import Completion, SamplingParams
from trinity.common.rewards.math_eval import verify_math_answer
from trinity.common.workflows.base import Task, WorkflowError, experience_from_completion
from trinity.common.workflows.math_eval import qwen_math_messages
from trinity.common.workflows.single_turn import Messages, SingleTurnWorkflow


class OnPolicyDistillWorkflow(SingleTurnWorkflow):
    """Student samples, teacher (first auxiliary model) scores; reward 0. Workflow arg ``temperature`` (teacher's)."""

    def __init__(self, sampling: SamplingParams | None = None, *, temperature: float = 1.0) -> None:
        super().__init__(sampling)
        self.temperature = float(temperature)

    def teacher(self) -> RolloutModel:
        """Return the teacher: the first auxiliary model; raises WorkflowError when there is none."""
        return self.first_auxiliary("teacher")

    def reward(self, task: Task, completion: Completion) -> tuple[float, dict[str, float]]:
        """Return reward 0: the teacher's log-probs, not a reward, drive the update."""
        return 0.0, {}

    def run(self, engine: RolloutModel, task: Task) -> list[Experience]:
        """Sample with the student, score with the teacher, return experiences carrying ``teacher_logprobs``."""
        teacher = self.teacher()
        completions = self.sample(engine, task)
        scores = teacher.score_tokens(
            [c.prompt_tokens.tolist() for c in completions], [c.response_tokens.tolist() for c in completions],
            self.temperature,
        )
        if len(scores) != len(completions):
            raise WorkflowError(f"the teacher scored {len(scores)} replies, {len(completions)} were sent")
        experiences = []
        for run_id, (completion, teacher_logprobs) in enumerate(zip(completions, scores, strict=True)):
            if len(teacher_logprobs) != len(completion.response_tokens):
                raise WorkflowError(
                    f"the teacher returned {len(teacher_logprobs)} log-probs for {len(completion.response_tokens)} "
                    "response tokens; do teacher and student share a tokenizer?"
                )
            reward, parts = self.reward(task, completion)
            kl = float((completion.logprobs.float() - teacher_logprobs.float()).sum())
            info = {"reward_parts": parts, "metrics": {**parts, "kl_divergence": kl}}
            experience = experience_from_completion(task, completion, run_id, reward, info)
            experiences.append(dataclasses.replace(experience, teacher_logprobs=teacher_logprobs.float()))
        return experiences


class OnPolicyDistillMathWorkflow(OnPolicyDistillWorkflow):
    """Distillation on math in the Qwen2.5-Math style; reward: the answer's correctness (``accuracy``)."""

    def messages(self, task: Task) -> Messages:
        """Return the Qwen2.5-Math conversation of the task's question."""
        return qwen_math_messages(task.prompt)

    def reply_prefix(self, task: Task) -> str | None:
        """Return None: the prompt is fixed."""
        return None

    def reward(self, task: Task, completion: Completion) -> tuple[float, dict[str, float]]:
        """Return 1.0 when the reply's final answer equals the task's answer, else 0.0 (0 without an answer)."""
        if task.answer is None or not completion.text:
            return 0.0, {}
        accuracy = verify_math_answer(completion.text, task.answer)
        return accuracy, {"accuracy": accuracy}
