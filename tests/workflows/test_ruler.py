"""RULER workflows: an LLM judge scores a task's replies side by side (``math_ruler_workflow``), or the policy
judges its own replies and, with the truth known, is trained to judge (``math_trainable_ruler_workflow``).

Replies run on the tiny model's real engine. A judge that answers with a
parseable list is something the random tiny model cannot be, so the judge's
answers are scripted (``ScriptedEngine``: the tiny model's tokenizer, fixed
texts); the tests say which.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.workflows.scripted import ScriptedEngine, cycling
from trinity.common.models.client import EngineClient
from trinity.common.models.engine import SamplingParams
from trinity.common.models.hf_engine import HFEngine
from trinity.common.rewards import compute_reward
from trinity.common.workflows import WORKFLOWS, Task, WorkflowError, make_workflow
from trinity.common.workflows.ruler import judge_messages, parse_scores
from trinity.common.workflows.simple import R1_SYSTEM_PROMPT


def policy_and_judge(replies: list[str], judgements: list[str]) -> Callable[[str], str]:
    """A script answering math prompts with ``replies`` and judge prompts with ``judgements``, each in turn."""
    answer, judge = cycling(replies), cycling(judgements)
    return lambda prompt: judge(prompt) if "Candidate solution 1:" in prompt else answer(prompt)


GOOD = "<think>\n2 and 3\n</think>\n<answer>\n5\n</answer>"
BAD = "<think>\nno\n</think>\n<answer>\n7\n</answer>"


def test_scores_are_read_from_the_judges_last_list() -> None:
    assert parse_scores("first [9, 9]; on reflection: [0.2, 1.5, -1]", 3) == [0.2, 1.0, 0.0]
    assert parse_scores("[0.5, 0.5]", 3) is None  # another length
    assert parse_scores("no list at all", 1) is None
    assert parse_scores("[1, 'a']", 2) is None and parse_scores("[1, True]", 2) is None
    assert parse_scores("] then [", 1) is None and parse_scores("[__import__('os')]", 1) is None


def test_the_judge_sees_every_reply_numbered() -> None:
    system, user = judge_messages("What is 2 plus 3?", ["five", "seven"])
    assert "2 candidate solutions" in system["content"]
    assert "Question: What is 2 plus 3?" in user["content"]
    assert "Candidate solution 1: five\n\nCandidate solution 2: seven" in user["content"]
    assert user["content"].endswith("[score for solution 1, score for solution 2, ..., score for solution 2]")


def test_upstream_names_are_registered() -> None:
    assert WORKFLOWS.get("math_ruler_workflow") is WORKFLOWS.get("async_math_ruler_workflow")
    assert WORKFLOWS.get("math_trainable_ruler_workflow").__name__ == "MathTrainableRulerWorkflow"


def test_ruler_rewards_are_the_auxiliary_judges_scores(shared_engine: HFEngine) -> None:
    """The policy is scripted (2 right, 1 wrong answer) so the gold rewards are known; the judge is scripted too."""
    policy = ScriptedEngine(shared_engine.tokenizer, cycling([GOOD, BAD, GOOD]))
    judge = ScriptedEngine(shared_engine.tokenizer, cycling(["Solution 2 is wrong. [0.9, 0.1, 0.8]"]))
    workflow = make_workflow("math_ruler_workflow", SamplingParams(max_tokens=16), {"judge_max_tokens": 64})
    workflow.auxiliary_models = [judge]
    task = Task(prompt="What is 2 plus 3?", answer="5", repeat_times=3, index=1)
    experiences = workflow.run(policy, task)
    assert [e.reward for e in experiences] == [0.9, 0.1, 0.8]
    gold = [compute_reward("math_reward", text, "5")[0] for text in (GOOD, BAD, GOOD)]
    assert [e.info["metrics"]["gold_reward"] for e in experiences] == gold and gold[0] > gold[1]
    assert all(e.info["metrics"]["judge_success"] == 1.0 for e in experiences)
    ((kind, count, params),) = judge.calls
    assert (kind, count, params.n, params.max_tokens) == ("chat", 1, 1, 64)
    assert policy.calls[0][2].n == 3
    prompt = shared_engine.tokenizer.decode(experiences[0].tokens[: experiences[0].prompt_length].tolist())
    assert R1_SYSTEM_PROMPT.split(".")[0] in prompt  # replies are asked as math_workflow asks


def test_a_judge_without_a_list_gives_zero_and_says_so(shared_engine: HFEngine) -> None:
    """The judge here is the real tiny model: it never writes a list of three scores."""
    workflow = make_workflow("math_ruler_workflow", SamplingParams(max_tokens=8), {"judge_max_tokens": 8})
    workflow.auxiliary_models = [EngineClient(shared_engine)]
    experiences = workflow.run(shared_engine, Task(prompt="What is 2 plus 3?", answer="5", repeat_times=3))
    assert [e.reward for e in experiences] == [0.0, 0.0, 0.0]
    assert all(e.info["metrics"]["judge_success"] == 0.0 for e in experiences)
    assert all(e.logprobs is not None and e.response_length >= 1 for e in experiences)


def test_no_judge_is_a_one_line_error(shared_engine: HFEngine) -> None:
    with pytest.raises(WorkflowError, match=r"needs a judge model: add one under explorer\.auxiliary_models"):
        make_workflow("math_ruler_workflow").run(shared_engine, Task(prompt="q", answer="1"))
    with pytest.raises(WorkflowError, match="gold_probability must be within"):
        make_workflow("math_trainable_ruler_workflow", None, {"gold_probability": 2})


def test_trainable_ruler_without_the_truth_rewards_the_policys_own_scores(shared_engine: HFEngine) -> None:
    policy = ScriptedEngine(shared_engine.tokenizer, policy_and_judge([GOOD, BAD], ["[0.7, 0.2]"]))
    workflow = make_workflow("math_trainable_ruler_workflow", SamplingParams(max_tokens=16), {"gold_probability": 0})
    experiences = workflow.run(policy, Task(prompt="What is 2 plus 3?", answer="5", repeat_times=2))
    assert [e.reward for e in experiences] == [0.7, 0.2] and len(policy.calls) == 2


def test_trainable_ruler_with_the_truth_trains_the_judging_too(shared_engine: HFEngine) -> None:
    judgements = ["[1.0, 0.0]", "[0.5, 0.5]", "nothing"]
    policy = ScriptedEngine(shared_engine.tokenizer, policy_and_judge([GOOD, BAD, BAD], judgements))
    workflow = make_workflow("math_trainable_ruler_workflow", SamplingParams(max_tokens=16), {"gold_probability": 1})
    task = Task(prompt="What is 2 plus 3?", answer="5", repeat_times=3, index=5)
    out = workflow.run(policy, task)
    replies, judged = out[:3], out[3:]
    gold = [compute_reward("math_reward", text, "5")[0] for text in (GOOD, BAD, BAD)]
    assert [e.reward for e in replies] == gold and {e.group_id for e in replies} == {task.group_id}
    assert {e.group_id for e in judged} == {f"{task.group_id}/ruler"} and [e.run_id for e in judged] == [0, 1, 2]
    targets = [(g + 0.1) / 1.2 for g in gold]
    # the first judgement has 2 scores for 3 replies: unparsed, reward 0, like the third
    assert [e.reward for e in judged] == [0.0, 0.0, 0.0]
    assert all(e.info["metrics"]["judge_success"] == 0.0 for e in out)
    good_judge = ScriptedEngine(shared_engine.tokenizer, policy_and_judge([GOOD, BAD, BAD], ["[1, 0, 0]"]))
    judged = workflow.run(good_judge, task)[3:]
    expected = 1.0 - sum(abs(s - t) for s, t in zip([1, 0, 0], targets, strict=True)) / 3
    assert [e.reward for e in judged] == pytest.approx([expected] * 3)
    assert judged[0].info["metrics"]["reward_for_judge"] == pytest.approx(expected)


def test_trainable_ruler_draws_the_same_for_the_same_task() -> None:
    workflow = make_workflow("math_trainable_ruler_workflow", None, {"gold_probability": 0.5})
    tasks = [Task(prompt="q", answer="1", index=i) for i in range(200)]
    draws = [workflow.gold_is_known(t) for t in tasks]
    assert draws == [workflow.gold_is_known(t) for t in tasks]
    assert 60 < sum(draws) < 140
