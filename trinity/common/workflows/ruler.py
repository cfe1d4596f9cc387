"""Upstream Trinity-RFT's RULER workflows: an LLM judge ranks a task's replies side by side and its scores are
the rewards (``math_ruler_workflow``, ``async_math_ruler_workflow``, ``math_trainable_ruler_workflow``).

The replies are sampled as ``math_workflow`` samples them (DeepSeek-R1's
think/answer format with ``math_reward``). Each reply's ``math_reward``,
the *gold reward*, is kept as a metric (``gold_reward`` and its parts), never
trained on, except where the trainable variant says so. The judge gets the
question and every reply of the task in one conversation and is asked to end
with a list of scores in [0, 1], one per reply (RULER, relative universal
LLM-elicited rewards). :func:`parse_scores` reads the last ``[...]`` of its
answer; an answer without a list of the right length gives every reply 0 and
``judge_success`` 0.

* ``math_ruler_workflow``: the judge is the first auxiliary model
  (``explorer.auxiliary_models[0]``); the rewards are its scores.
* ``math_trainable_ruler_workflow``: the judge is the policy itself. With
  probability ``gold_probability`` (workflow arg, upstream's 0.2) the task's
  ground truth counts as known: the replies are rewarded with the gold reward
  and the policy judges ``repeat_times`` times, each judgement an experience
  of its own group (``<task group>/ruler``) rewarded by how close its scores
  come to the gold ones (``1 - mean |score - gold|``, gold rescaled from
  [-0.1, 1.1] to [0, 1]; the metric ``reward_for_judge``); otherwise the policy judges once and its scores are
  the rewards. The draw is seeded by the task, so a rerun draws the same.
"""

from __future__ import annotations

import ast
import dataclasses
import random
from collections.abc import Sequence
from typing import Any

from trinity.common.experience import Experience
from trinity.common.models.client import RolloutModel
from trinity.common.models.engine import Completion, SamplingParams
from trinity.common.workflows.base import Task, WorkflowError, experience_from_completion
from trinity.common.workflows.simple import R1MathWorkflow
from trinity.common.workflows.single_turn import Messages, checked, metrics_of

#: The reply format the judge is told the solutions follow.
_FORMAT = (
    "Solution format requirement: first think about the reasoning process in the mind and then provides the final "
    "answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, "
    "respectively, i.e.,\n<think> reasoning process here </think>\n<answer> answer here </answer>."
)


def judge_messages(question: Any, replies: Sequence[str]) -> Messages:
    """Return the conversation asking a judge to score ``replies`` to ``question`` in [0, 1], ending in a list."""
    count = len(replies)
    system = (
        f"You are a fair judge. The user will provide a question and {count} candidate solutions to it. Your task "
        "is to compare the solutions, see how well they resolve the question, and assign a score within the range "
        "[0, 1] for each solution."
    )
    solutions = "\n\n".join(f"Candidate solution {i + 1}: {reply}" for i, reply in enumerate(replies))
    user = (
        f"Below is a question and several candidate solutions.\n\nQuestion: {question}\n\n{_FORMAT}\n\n{solutions}\n\n"
        "Please assign a score within the range [0, 1] for each of them, reflecting how well they solve the "
        "question.\nYou may compare them against each other and think step by step before returning your final "
        "scores, but keep your reasoning process brief and concise when possible.\n\nConclude your response with "
        "a list of scores, in the following format: [score for solution 1, score for solution 2, ..., score for "
        f"solution {count}]"
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def parse_scores(answer: str, count: int) -> list[float] | None:
    """Return the ``count`` scores of a judge's ``answer`` (its last ``[...]``), each clipped to [0, 1].

    None when the answer holds no such list, the list does not parse as
    numbers, or it has another length.
    """
    start, end = answer.rfind("["), answer.rfind("]")
    if start == -1 or end < start:
        return None
    try:
        values = ast.literal_eval(answer[start:end + 1])
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if not isinstance(values, (list, tuple)) or len(values) != count:
        return None
    scores = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        scores.append(min(1.0, max(0.0, float(value))))
    return scores


class MathRulerWorkflow(R1MathWorkflow):
    """``math_ruler_workflow``: replies as ``math_workflow``, rewarded by the first auxiliary model's RULER scores.

    Workflow args: ``judge_max_tokens`` (the judge's reply length, default
    1024) and ``judge_temperature`` (default 1.0).
    """

    def __init__(self, sampling: SamplingParams | None = None, *, judge_max_tokens: int = 1024,
                 judge_temperature: float = 1.0) -> None:
        super().__init__(sampling)
        if judge_max_tokens < 1:
            raise WorkflowError(f"judge_max_tokens must be at least 1, got {judge_max_tokens}")
        self.judge_max_tokens = int(judge_max_tokens)
        self.judge_temperature = float(judge_temperature)

    def judge(self, engine: RolloutModel) -> RolloutModel:
        """Return the judge: the first auxiliary model; raises WorkflowError when there is none."""
        return self.first_auxiliary("judge")

    def judge_params(self, n: int) -> SamplingParams:
        """Return the judge's sampling: ``n`` judgements of ``judge_max_tokens`` at ``judge_temperature``."""
        return SamplingParams(n=n, max_tokens=self.judge_max_tokens, temperature=self.judge_temperature)

    def ask_judge(self, judge: RolloutModel, task: Task, replies: Sequence[Completion], n: int) -> list[Completion]:
        """Return ``n`` judgements of the task's ``replies``."""
        (judgements,) = judge.chat([judge_messages(task.prompt, [r.text for r in replies])], self.judge_params(n))
        return checked(judgements, n)

    def gold(self, task: Task, replies: Sequence[Completion]) -> list[tuple[float, dict[str, float]]]:
        """Return each reply's gold reward (``math_reward``, or the task set's reward) and its parts."""
        return [self.reward(task, reply) for reply in replies]

    def run(self, engine: RolloutModel, task: Task) -> list[Experience]:
        """Sample the replies, have the judge score them side by side, reward each with its score."""
        replies = self.sample(engine, task)
        gold = self.gold(task, replies)
        (judgement,) = self.ask_judge(self.judge(engine), task, replies, 1)
        scores = parse_scores(judgement.text, len(replies))
        return self.experiences(task, replies, gold, scores)

    def experiences(self, task: Task, replies: Sequence[Completion], gold: Sequence[tuple[float, dict[str, float]]],
                    scores: list[float] | None, *, reward_gold: bool = False) -> list[Experience]:
        """Return the replies' experiences: rewarded with the judge's ``scores`` (0 without), or the gold reward."""
        out = []
        for run_id, (reply, (gold_reward, parts)) in enumerate(zip(replies, gold, strict=True)):
            reward = gold_reward if reward_gold else (scores[run_id] if scores is not None else 0.0)
            metrics = {**metrics_of(parts), "gold_reward": gold_reward, "judge_success": float(scores is not None)}
            out.append(experience_from_completion(task, reply, run_id, reward,
                                                  {"reward_parts": parts, "metrics": metrics}))
        return out


class MathTrainableRulerWorkflow(MathRulerWorkflow):
    """``math_trainable_ruler_workflow``: the policy judges its own replies; see the module docstring.

    Workflow args: those of ``math_ruler_workflow``, and ``gold_probability``
    (how often the ground truth counts as known, default 0.2).
    """

    def __init__(self, sampling: SamplingParams | None = None, *, judge_max_tokens: int = 1024,
                 judge_temperature: float = 1.0, gold_probability: float = 0.2) -> None:
        super().__init__(sampling, judge_max_tokens=judge_max_tokens, judge_temperature=judge_temperature)
        if not 0.0 <= gold_probability <= 1.0:
            raise WorkflowError(f"gold_probability must be within [0, 1], got {gold_probability}")
        self.gold_probability = float(gold_probability)

    def judge(self, engine: RolloutModel) -> RolloutModel:
        """Return the judge: the policy being trained."""
        return engine

    def gold_is_known(self, task: Task) -> bool:
        """Whether this task's ground truth counts as known (a draw seeded by the task)."""
        draw = random.Random(f"trinity-ruler:{task.task_set}:{task.index}:{task.group_id}").random()
        return draw < self.gold_probability

    def run(self, engine: RolloutModel, task: Task) -> list[Experience]:
        """Sample the replies and judge them with the policy; with the truth known, train the judging too."""
        replies = self.sample(engine, task)
        gold = self.gold(task, replies)
        if not self.gold_is_known(task):
            (judgement,) = self.ask_judge(engine, task, replies, 1)
            return self.experiences(task, replies, gold, parse_scores(judgement.text, len(replies)))
        judgements = self.ask_judge(engine, task, replies, task.repeat_times)
        targets = [(reward + 0.1) / 1.2 for reward, _ in gold]  # gold reward from [-0.1, 1.1] to [0, 1]
        parsed = [parse_scores(j.text, len(replies)) for j in judgements]
        success = sum(p is not None for p in parsed) / len(parsed)
        out = self.experiences(task, replies, gold, None, reward_gold=True)
        for exp in out:
            exp.info["metrics"]["judge_success"] = success
        for run_id, (judgement, scores) in enumerate(zip(judgements, parsed, strict=True)):
            closeness = 0.0 if scores is None else 1.0 - sum(
                abs(s - t) for s, t in zip(scores, targets, strict=True)) / len(targets)
            info = {"metrics": {"reward_for_judge": closeness, "judge_success": success}}
            judged = experience_from_completion(task, judgement, run_id, closeness, info)
            out.append(dataclasses.replace(judged, group_id=f"{task.group_id}/ruler"))  # a group of its own
        return out


__all__ = ["MathRulerWorkflow", "MathTrainableRulerWorkflow", "judge_messages", "parse_scores"]
