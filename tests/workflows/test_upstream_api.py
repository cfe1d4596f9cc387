"""Workflows and rewards written as upstream Trinity-RFT's developer guide writes them, run here unchanged.

The classes below follow ``develop_workflow.md`` (same imports, same shapes);
they run against the tiny model's real in-process ``hf`` engine through the
scheduler's engine client, as a run does.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, List  # noqa: UP035 - the guide writes List

import pytest
import torch

from trinity.common.config.schema import FormatConfig
from trinity.common.experience import EID, Experience
from trinity.common.models.client import EngineClient
from trinity.common.models.engine import SamplingParams
from trinity.common.models.hf_engine import HFEngine
from trinity.common.models.model import ModelWrapper
from trinity.common.rewards import REWARD_FUNCTIONS, RewardFn, compute_reward, reward_class
from trinity.common.workflows import WORKFLOWS, Task, Workflow, make_workflow
from trinity.common.workflows.base import is_upstream_style
from trinity.common.workflows.upstream import UpstreamWorkflowRunner


class ExampleWorkflow(Workflow):
    """develop_workflow.md's "Full Code Example"."""

    can_reset: bool = True
    can_repeat: bool = True

    def __init__(self, task: Task, model: ModelWrapper, auxiliary_models: List):  # noqa: UP006 - the guide's code
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)
        self.question = task.raw_task.get("question")
        self.answer = task.raw_task.get("answer")
        self.rollout_args = task.rollout_args

    def calculate_reward(self, response: str, truth: str) -> float:
        return 1.0 if response == truth else 0.0

    def run(self) -> List[Experience]:  # noqa: UP006
        responses = self.model.chat([{"role": "user", "content": f"Question:\n{self.question}"}],
                                    n=self.rollout_args.n, temperature=self.rollout_args.temperature)
        experiences = []
        for response in responses:
            reward: float = self.calculate_reward(response.response_text, self.answer)
            experiences.append(Experience(tokens=response.tokens, prompt_length=response.prompt_length,
                                          reward=reward, logprobs=response.logprobs))
        return experiences

    def reset(self, task: Task) -> None:
        self.question = task.raw_task.get("question")
        self.answer = task.raw_task.get("answer")

    def set_repeat_times(self, repeat_times: int, run_id_base: int) -> None:
        self.repeat_times = repeat_times
        self.run_id_base = run_id_base


class OneRunWorkflow(Workflow):
    """No ``can_repeat``: the framework runs it once per repeat; it scores with the task's reward class."""

    def __init__(self, *, task: Task, model: ModelWrapper, auxiliary_models: list | None = None) -> None:
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)
        self.reward_fn = task.reward_fn(**task.reward_fn_args)

    def run(self) -> list[Experience]:
        (reply,) = self.model.chat([{"role": "user", "content": self.task.task_desc}], max_tokens=6)
        self.logger.info("answer %r", reply.response_text)
        scores = self.reward_fn(response=reply.response_text, truth=self.task.truth)
        return [Experience(tokens=reply.tokens, prompt_length=reply.prompt_length, logprobs=reply.logprobs,
                           reward=sum(scores.values()), metrics={"accuracy": scores["accuracy"]})]


class AsyncWorkflow(Workflow):
    is_async: bool = True

    async def run_async(self) -> list[Experience]:
        replies = await self.model.chat_async([{"role": "user", "content": "hi"}], max_tokens=4)
        return [dataclass_copy(r, reward=0.5) for r in replies]


def dataclass_copy(experience: Experience, **changes: Any) -> Experience:
    import dataclasses

    return dataclasses.replace(experience, **changes)


@pytest.fixture
def client(shared_engine: HFEngine) -> EngineClient:
    return EngineClient(shared_engine).bind(None)


def task_of(workflow: str, repeats: int, **fields: Any) -> Task:
    return Task(prompt="What is 2 plus 3?", answer="5", raw={"question": "What is 2 plus 3?", "answer": "5"},
                index=7, step=3, repeat_times=repeats, workflow=workflow, **fields)


def test_the_guides_full_example_trains_as_one_group_with_run_ids(client: EngineClient) -> None:
    assert is_upstream_style(ExampleWorkflow) and not is_upstream_style(WORKFLOWS.get("toy_repeat"))
    WORKFLOWS.register_module("guide_example_workflow", ExampleWorkflow, force=True)
    workflow = make_workflow("guide_example_workflow", SamplingParams(max_tokens=5, temperature=1.0))
    assert isinstance(workflow, UpstreamWorkflowRunner)
    task = task_of("guide_example_workflow", 4)
    made = workflow.run(client, task)
    assert len(made) == 4
    assert {e.group_id for e in made} == {task.group_id}  # the framework's group, though the workflow set none
    assert [e.run_id for e in made] == [0, 1, 2, 3]
    assert all(e.eid is not None and (e.eid.batch, e.eid.task) == (3, 7) for e in made)
    for experience in made:
        assert experience.logprobs is not None and len(experience.logprobs) == experience.response_length
        assert experience.reward == 0.0 and experience.info["task_index"] == 7


def test_a_workflow_without_can_repeat_runs_once_per_repeat_with_the_tasks_reward_class(
        client: EngineClient, caplog: pytest.LogCaptureFixture) -> None:
    runner = UpstreamWorkflowRunner(OneRunWorkflow, SamplingParams(max_tokens=6))
    task = task_of("one_run", 3, reward_fn="math_reward")
    with caplog.at_level("INFO", logger=__name__):
        made = runner.run(client, task)
    assert [e.run_id for e in made] == [0, 1, 2] and {e.group_id for e in made} == {task.group_id}
    assert all(e.model_version == 0 and e.info["metrics"]["accuracy"] in (0.0, 1.0) for e in made)
    assert len([r for r in caplog.records if r.getMessage().startswith("answer ")]) == 3  # self.logger works


def test_an_async_workflow_runs_its_repeats_in_one_event_loop(client: EngineClient) -> None:
    made = UpstreamWorkflowRunner(AsyncWorkflow, SamplingParams(max_tokens=4)).run(client, task_of("async", 2))
    assert [e.run_id for e in made] == [0, 1] and all(e.reward == 0.5 for e in made)


class TwoKindsWorkflow(Workflow):
    """Upstream's trainable-RULER pattern: its own task ids split the replies and the judgements into two groups."""

    can_repeat: bool = True

    def run(self) -> list[Experience]:
        replies = self.model.chat([{"role": "user", "content": "hi"}], n=2, max_tokens=3)
        judged = self.model.chat([{"role": "user", "content": "judge"}], n=2, max_tokens=3)
        for reply in replies:
            assert reply.eid is not None
            reply.eid.task = str(self.task.task_id)
        for judgement in judged:
            assert judgement.eid is not None
            judgement.eid.task = str(self.task.task_id) + "-ruler"
        return replies + judged


def test_a_task_id_the_workflow_sets_is_a_group_of_its_own(client: EngineClient) -> None:
    task = task_of("two_kinds", 2)
    made = UpstreamWorkflowRunner(TwoKindsWorkflow, SamplingParams(max_tokens=3)).run(client, task)
    assert [e.group_id for e in made] == [task.group_id] * 2 + [f"{task.group_id}/7-ruler"] * 2


def test_the_model_wrapper_speaks_upstreams_calls(client: EngineClient) -> None:
    model = ModelWrapper(client, SamplingParams(max_tokens=4))
    made = model.generate(["a", "b"], n=2, temperature=0.0)
    assert len(made) == 4 and all(e.response_text is not None and e.prompt_length > 0 for e in made)
    assert made[0].prompt_text is not None and isinstance(model.model_version, int)
    scored = model.logprobs(made[0].tokens.tolist())
    assert scored.shape == (len(made[0].tokens) - 1,) and bool(torch.isfinite(scored).all())
    assert asyncio.run(model.chat_async([{"role": "user", "content": "x"}], max_tokens=2))
    with pytest.raises(TypeError, match="unsupported sampling argument"):
        model.chat([{"role": "user", "content": "x"}], frequency_bonus=2)


def test_a_task_built_as_upstream_builds_one(tmp_path: Path) -> None:
    task = Task(workflow=ExampleWorkflow, raw_task={"question": "2+2?", "answer": "4"},  # type: ignore[arg-type]
                format_args=FormatConfig(prompt_key="question", response_key="answer"), repeat_times=None)
    assert (task.prompt, task.answer, task.task_desc, task.truth, task.raw) == ("2+2?", "4", "2+2?", "4",
                                                                                  task.raw_task)
    assert task.repeat_times == 1 and task.format is task.format_args
    sentinel = object()
    built = task.to_workflow(model=sentinel)
    assert isinstance(built, ExampleWorkflow) and built.model is sentinel and built.question == "2+2?"


class RatioReward(RewardFn):
    """An upstream-style reward class: built with ``reward_fn_args``, called with keywords."""

    def __init__(self, scale: float = 1.0, **kwargs: Any) -> None:
        self.scale = scale

    def __call__(self, response: str, truth: str | None = None, **kwargs: Any) -> dict[str, float]:
        return {"overlap": self.scale * float(str(truth) in response), "length": -0.01 * len(response)}


def test_reward_classes_and_functions_share_one_registry() -> None:
    REWARD_FUNCTIONS.register_module("ratio_reward_for_tests", RatioReward, force=True)
    total, parts = compute_reward("ratio_reward_for_tests", "it is 5", "5", options={"scale": 2.0})
    assert parts["ratio_reward_for_tests/overlap"] == 2.0 and total == pytest.approx(2.0 - 0.07)
    as_class = reward_class("math_reward")  # a registered function, seen as upstream's class
    assert as_class(pattern=None)(response="<answer>5</answer>", truth="5")["accuracy"] == 1.0
    assert reward_class("ratio_reward_for_tests") is RatioReward


def test_experience_accepts_upstreams_fields() -> None:
    experience = Experience(tokens=[1, 2, 3, 4], prompt_length=2, reward=1.0, logprobs=[-0.1, -0.2],
                            eid=EID(run=2, step=1), response_text="ab", prompt_text="xy", metrics={"m": 1.0})
    again = Experience.from_dict(experience.to_dict())
    assert again.eid is not None and (again.eid.run, again.eid.step) == (2, 1)
    assert again.response_text == "ab" and again.metrics == {"m": 1.0}


def test_the_extending_guides_code_runs(client: EngineClient) -> None:
    """Every Python block of docs/extending.md, executed as written, registers a workflow that runs."""
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "extending.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.DOTALL) if "WORKFLOWS" in b]
    assert len(blocks) == 2  # the algorithm block runs in tests/algorithm/test_upstream_classes.py
    for block in blocks:
        names = re.findall(r'register_module\("([^"]+)"\)', block)
        for name in names:  # a second test run in this process registers them again
            WORKFLOWS._items.pop(name, None)
        exec(compile(block, "docs/extending.md", "exec"), {})
        for name in names:
            workflow = make_workflow(name, SamplingParams(max_tokens=4))
            made = workflow.run(client, task_of(name, 2))
            assert len(made) == 2 and {e.group_id for e in made} == {task_of(name, 2).group_id}
