"""Tasks, the workflow registry and the math workflow (scripted answers and the tiny model)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.plans import make_plan
from tests.workflows.scripted import ScriptedEngine, cycling
from trinity.common.models.engine import SamplingParams
from trinity.common.models.hf_engine import HFEngine
from trinity.common.workflows import (
    WORKFLOWS,
    MathWorkflow,
    Task,
    WorkflowError,
    make_workflow,
    sampling_from_model,
)
from trinity.utils.registry import UnknownNameError


def test_task_from_a_task_set_record() -> None:
    plan = make_plan({"buffer.explorer_input.eval_tasksets": [{
        "name": "eval/gsm", "path": "gsm.jsonl", "default_workflow_type": "math",
        "default_reward_fn_type": "math_accuracy", "rollout_args": {"temperature": 0.0},
        "workflow_args": {"format_weight": 0.1}, "repeat_times": 2,
    }]})
    (task_set,) = plan.buffer.eval_tasksets
    record = {"prompt": "1+1?", "answer": "2", "raw": {"question": "1+1?", "answer": "2", "id": 9}, "index": 4}
    task = Task.from_record(record, task_set, epoch=1, step=7)
    assert (task.prompt, task.answer, task.index, task.epoch, task.step) == ("1+1?", "2", 4, 1, 7)
    assert task.repeat_times == 2 and task.raw["id"] == 9 and task.is_eval
    assert (task.workflow, task.reward_fn) == ("math", "math_accuracy")
    # the task set's whole rollout sampling (its rollout_args over the model's defaults) rides on the task
    assert task.sampling == {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "max_tokens": 8}
    assert task.workflow_args == {"format_weight": 0.1}
    assert task.group_id == "eval/gsm/e1/t4/s7"
    assert Task.from_record(record, task_set, repeat_times=8).repeat_times == 8
    with pytest.raises(ValueError, match="repeat_times"):
        Task(prompt="x", repeat_times=0)
    with pytest.raises(ValueError, match="unknown sampling override"):
        Task(prompt="x", sampling={"temprature": 1.0})


def test_registry_and_factory_errors() -> None:
    assert {"math", "toy_repeat", "guess_number"} <= set(WORKFLOWS.names())
    with pytest.raises(UnknownNameError, match="did you mean 'math'"):
        make_workflow("maht")
    with pytest.raises(WorkflowError, match="bad workflow_args"):
        make_workflow("math", args={"no_such_arg": 1})
    workflow = make_workflow("math", SamplingParams(temperature=0.3), {"format_weight": 0.5})
    assert isinstance(workflow, MathWorkflow) and workflow.format_weight == 0.5
    plan = make_plan({"model.temperature": 0.7, "model.top_p": 0.9, "model.top_k": 5, "model.max_response_tokens": 33})
    assert sampling_from_model(plan.model) == SamplingParams(max_tokens=33)
    # the model's sampling settings reach the tasks through their task set
    assert plan.buffer.train_taskset is not None
    train = Task.from_record({"prompt": "q", "index": 0}, plan.buffer.train_taskset)
    assert dataclasses.replace(sampling_from_model(plan.model), **train.sampling) == SamplingParams(
        temperature=0.7, top_p=0.9, top_k=5, max_tokens=33)


def test_sampling_for_applies_task_overrides_and_repeat_times() -> None:
    workflow = MathWorkflow(SamplingParams(temperature=1.0, max_tokens=64))
    task = Task(prompt="q", repeat_times=5, sampling={"temperature": 0.0, "max_tokens": 9})
    assert workflow.sampling_for(task) == SamplingParams(temperature=0.0, max_tokens=9, n=5)


def test_math_workflow_rewards_scripted_answers(shared_engine: HFEngine) -> None:
    replies = ["So it is \\boxed{42}.", "The answer is 41.", "#### 42", "maybe 40, no, 42"]
    engine = ScriptedEngine(shared_engine.tokenizer, cycling(replies), version=3)
    task = Task(prompt="What is 6 times 7?", answer="6*7 = 42\n#### 42", repeat_times=4, index=2, step=5)
    experiences = MathWorkflow(format_weight=0.5).run(engine, task)
    assert [e.reward for e in experiences] == [1.5, 0.5, 1.5, 1.0]
    assert [e.info["reward_parts"] for e in experiences][1] == {"math_accuracy": 0.0, "format": 1.0}
    assert [e.run_id for e in experiences] == [0, 1, 2, 3]
    assert {e.group_id for e in experiences} == {task.group_id}
    assert all(e.model_version == 3 for e in experiences)
    call, count, params = engine.calls[0]
    assert (call, count, params.n) == ("chat", 1, 4)
    tok = shared_engine.tokenizer
    for e, reply in zip(experiences, replies, strict=True):
        assert e.info["response"] == reply
        assert tok.decode(e.response_tokens.tolist(), skip_special_tokens=True) == reply
        prompt = tok.decode(e.tokens[: e.prompt_length].tolist())
        assert "What is 6 times 7?" in prompt and "Solve the problem" in prompt
        assert prompt.endswith("<|im_start|>assistant\n")
        assert e.logprobs is not None and torch.equal(e.logprobs, torch.full((e.response_length,), -0.5))


def test_math_workflow_on_the_tiny_model(shared_engine: HFEngine) -> None:
    workflow = MathWorkflow(SamplingParams(temperature=1.0, max_tokens=12), system_prompt=None)
    task = Task(prompt="What is 2 plus 3?", answer="5", repeat_times=3)
    experiences = workflow.run(shared_engine, task)
    assert len(experiences) == 3
    for e in experiences:
        assert e.reward in (0.0, 1.0)
        assert 1 <= e.response_length <= 12
        assert e.logprobs is not None and e.logprobs.shape == (e.response_length,)
        assert e.action_mask is not None and bool(e.action_mask.all())
        prompt = shared_engine.tokenizer.decode(e.tokens[: e.prompt_length].tolist())
        assert prompt == "<|im_start|>user\nWhat is 2 plus 3?<|im_end|>\n<|im_start|>assistant\n"
    # a wrong number of completions is an error, not a silently short group
    short = ScriptedEngine(shared_engine.tokenizer, cycling(["1"]))
    short.chat = lambda convs, params: [[ScriptedEngine._complete(short, [1])]]  # type: ignore[method-assign]
    with pytest.raises(WorkflowError, match="3 were asked"):
        workflow.run(short, dataclasses.replace(task))
