"""On-policy distillation: the student samples, the teacher (first auxiliary model) scores those very tokens."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.workflows.scripted import ScriptedEngine, cycling
from trinity.common.experience import make_batch
from trinity.common.models.client import EngineClient
from trinity.common.models.engine import SamplingParams
from trinity.common.models.hf_engine import HFEngine
from trinity.common.workflows import Task, WorkflowError, make_workflow
from trinity.common.workflows.math_eval import QWEN_BOXED_INSTRUCTION


@pytest.fixture(scope="module")
def teacher(tiny_model: Path) -> Iterator[HFEngine]:
    """A different model with the student's tokenizer: the tiny model with its weights perturbed (seeded)."""
    engine = HFEngine(str(tiny_model), max_prompt_tokens=512, torch_threads=1)
    generator = torch.Generator().manual_seed(0)
    weights = {name: value + 0.05 * torch.randn(value.shape, generator=generator)
               for name, value in engine.model.state_dict().items() if value.is_floating_point()}
    engine.load_state_dict(weights, version=7)
    yield engine


def test_teacher_log_probs_are_the_teachers_scores(shared_engine: HFEngine, teacher: HFEngine) -> None:
    params = SamplingParams(temperature=0.9, max_tokens=10, seed=3)
    workflow = make_workflow("on_policy_distill_workflow", params, {"temperature": 1.2})
    workflow.auxiliary_models = [EngineClient(teacher)]
    task = Task(prompt="What is 2 plus 3?", answer="5", repeat_times=3, system_prompt="Be brief.", index=2)
    experiences = workflow.run(shared_engine, task)
    assert [e.run_id for e in experiences] == [0, 1, 2] and {e.group_id for e in experiences} == {task.group_id}
    prompts = [e.tokens[: e.prompt_length].tolist() for e in experiences]
    assert prompts[0] == shared_engine.chat_prompt_tokens([{"role": "system", "content": "Be brief."},
                                                          {"role": "user", "content": "What is 2 plus 3?"}])
    scores = teacher.score_tokens(prompts, [e.response_tokens.tolist() for e in experiences], 1.2)
    student = shared_engine.score_tokens(prompts, [e.response_tokens.tolist() for e in experiences], 0.9)
    for e, score, own in zip(experiences, scores, student, strict=True):
        assert e.teacher_logprobs is not None and e.teacher_logprobs.shape == (e.response_length,)
        torch.testing.assert_close(e.teacher_logprobs, score, atol=1e-6, rtol=0)
        assert e.logprobs is not None
        torch.testing.assert_close(e.logprobs, own, atol=2e-5, rtol=0)  # behaviour log-probs: the student's
        assert not torch.allclose(e.teacher_logprobs, e.logprobs, atol=1e-3)  # a different model
        assert e.reward == 0.0
        assert e.info["metrics"]["kl_divergence"] == pytest.approx(float((e.logprobs - e.teacher_logprobs).sum()))
    # the trainer's batch carries them at the response positions
    batch = make_batch(experiences, pad_token_id=0)
    e = experiences[0]
    row = batch.teacher_logprobs[0]
    torch.testing.assert_close(row[e.prompt_length - 1 : e.prompt_length - 1 + e.response_length], e.teacher_logprobs)


def test_a_teacher_equal_to_the_student_agrees(shared_engine: HFEngine) -> None:
    params = SamplingParams(temperature=1.0, max_tokens=8)
    workflow = make_workflow("on_policy_distill_workflow", params)  # teacher temperature 1.0 by default
    workflow.auxiliary_models = [shared_engine]
    for e in workflow.run(shared_engine, Task(prompt="Repeat the letter a.", repeat_times=2)):
        assert e.teacher_logprobs is not None and e.logprobs is not None
        torch.testing.assert_close(e.teacher_logprobs, e.logprobs, atol=2e-5, rtol=0)
        assert abs(e.info["metrics"]["kl_divergence"]) < 1e-3


def test_math_distillation_rewards_correct_answers(shared_engine: HFEngine, teacher: HFEngine) -> None:
    # scripted student (the tiny model cannot answer), real teacher scoring the scripted tokens
    student = ScriptedEngine(shared_engine.tokenizer, cycling(["so \\boxed{5}", "it is 4"]))
    workflow = make_workflow("on_policy_distill_math_workflow", SamplingParams(max_tokens=16))
    workflow.auxiliary_models = [teacher]
    experiences = workflow.run(student, Task(prompt="What is 2 plus 3?", answer="5", repeat_times=2))
    assert [e.reward for e in experiences] == [1.0, 0.0]
    assert [e.info["metrics"]["accuracy"] for e in experiences] == [1.0, 0.0]
    prompt = shared_engine.tokenizer.decode(experiences[0].tokens[: experiences[0].prompt_length].tolist())
    assert "You are a helpful assistant." in prompt and f"What is 2 plus 3?\n{QWEN_BOXED_INSTRUCTION}" in prompt
    for e in experiences:
        (score,) = teacher.score_tokens([e.tokens[: e.prompt_length].tolist()], [e.response_tokens.tolist()], 1.0)
        assert e.teacher_logprobs is not None
        torch.testing.assert_close(e.teacher_logprobs, score, atol=1e-6, rtol=0)


def test_no_teacher_is_a_one_line_error(shared_engine: HFEngine) -> None:
    for name in ("on_policy_distill_workflow", "on_policy_distill_math_workflow"):
        workflow = make_workflow(name)
        with pytest.raises(WorkflowError, match=r"add one under explorer\.auxiliary_models") as info:
            workflow.run(shared_engine, Task(prompt="q", answer="1"))
        assert "\n" not in str(info.value)
