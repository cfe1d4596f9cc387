"""Upstream's single-turn workflow classes, subclassed as upstream users subclass them (upstream's import paths,
``reset`` / ``format_messages`` overridden), run by the framework's upstream runner.

Replies are scripted (``ScriptedEngine``: the tiny model's tokenizer, fixed texts) so the rewards are known;
the real engine serves them in tests/e2e/test_upstream_guides.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.workflows.scripted import ScriptedEngine, cycling
from trinity.common.config.schema import FormatConfig
from trinity.common.models.engine import SamplingParams
from trinity.common.models.hf_engine import HFEngine
from trinity.common.rewards import compute_reward
from trinity.common.workflows import WORKFLOWS, make_workflow
from trinity.common.workflows.customized_math_workflows import MathBoxedWorkflow
from trinity.common.workflows.simple import R1_SYSTEM_PROMPT
from trinity.common.workflows.upstream import UpstreamWorkflowRunner
from trinity.common.workflows.workflow import MathWorkflow, SimpleWorkflow, Task

GOOD = "<think>\nadd\n</think>\n<answer>\n5\n</answer>"
BAD = "<think>\nno\n</think>\n<answer>\n7\n</answer>"


class QuotedQuestion(SimpleWorkflow):
    """A user's subclass: the question asked in quotes, nothing else changed."""

    def format_messages(self):  # type: ignore[no-untyped-def]
        return [{"role": "user", "content": f'"{self.task_desc}"'}]


class BoxedFromMessages(MathBoxedWorkflow):
    """BOTS' pattern: the task's prompt is already a message list."""

    def reset(self, task: Task) -> None:
        super().reset(task)
        self.task_desc = task.raw_task["messages"]

    def format_messages(self):  # type: ignore[no-untyped-def]
        return self.task_desc


QUESTION = {"question": "What is 2 plus 3?", "answer": "5",
            "messages": [{"role": "user", "content": "What is 2 plus 3? Box it."}]}


def run(cls: type[Any], engine: ScriptedEngine, **task_fields: Any) -> list[Any]:
    task = Task(prompt=QUESTION["question"], answer="5", raw=dict(QUESTION), index=4, step=1, repeat_times=3,
                format=FormatConfig(), **task_fields)
    return UpstreamWorkflowRunner(cls, SamplingParams(max_tokens=16)).run(engine, task)


def test_a_subclass_of_simple_workflow_asks_its_way_and_is_rewarded(shared_engine: HFEngine) -> None:
    engine = ScriptedEngine(shared_engine.tokenizer, cycling([GOOD, BAD, GOOD]))
    made = run(QuotedQuestion, engine, reward_fn="math_reward")
    assert [e.run_id for e in made] == [0, 1, 2] and len({e.group_id for e in made}) == 1
    for experience, text in zip(made, (GOOD, BAD, GOOD), strict=True):
        total, parts = compute_reward("math_reward", text, "5")
        assert experience.reward == pytest.approx(total)
        assert experience.info["metrics"] == {"accuracy": parts["math_reward/accuracy"],
                                              "format_score": parts["math_reward/format_score"]}
    prompt = shared_engine.tokenizer.decode(made[0].tokens[: made[0].prompt_length].tolist())
    assert '"What is 2 plus 3?"' in prompt
    ((_, _, params),) = engine.calls
    assert params.n == 3 and params.max_tokens == 16 and params.top_k == 0  # upstream's top_k -1 is "off"


def test_math_workflow_defaults_to_math_reward_and_r1s_prompt(shared_engine: HFEngine) -> None:
    engine = ScriptedEngine(shared_engine.tokenizer, cycling([GOOD]))
    made = run(MathWorkflow, engine)
    assert all(e.reward == pytest.approx(1.1) for e in made)  # right answer, right format
    prompt = shared_engine.tokenizer.decode(made[0].tokens[: made[0].prompt_length].tolist())
    assert R1_SYSTEM_PROMPT.split(".")[0] in prompt


def test_a_boxed_subclass_reads_messages_and_passes_its_args_to_the_reward(shared_engine: HFEngine) -> None:
    engine = ScriptedEngine(shared_engine.tokenizer, cycling(["so \\boxed{5}", "<think>x</think> \\boxed{7}"]))
    made = run(BoxedFromMessages, engine, workflow_args={"with_think": True, "format_score_coef": 0.5})
    assert [e.reward for e in made] == [0.5, 0.0, 0.5]  # right but no think tags (1 - 0.5); wrong, with them (0)
    prompt = shared_engine.tokenizer.decode(made[0].tokens[: made[0].prompt_length].tolist())
    assert "Box it." in prompt and "reasoning process" not in prompt  # the task's own messages, no system prompt


def test_a_simple_workflow_without_a_reward_is_one_line(shared_engine: HFEngine) -> None:
    from trinity.common.workflows.base import WorkflowError

    engine = ScriptedEngine(shared_engine.tokenizer, cycling([GOOD]))
    with pytest.raises(WorkflowError, match="needs a reward function: set the task set's default_reward_fn_type"):
        run(SimpleWorkflow, engine)


def test_registered_subclasses_run_through_make_workflow(shared_engine: HFEngine) -> None:
    WORKFLOWS.register_module("quoted_question_test", QuotedQuestion, force=True)
    try:
        workflow = make_workflow("quoted_question_test", SamplingParams(max_tokens=8))
        assert isinstance(workflow, UpstreamWorkflowRunner)
    finally:
        WORKFLOWS._items.pop("quoted_question_test", None)
