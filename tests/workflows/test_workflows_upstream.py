"""Upstream Trinity-RFT's single-turn workflows: names, prompts, sampling, rewards, experiences.

Every workflow runs on the tiny model's real ``HFEngine`` (experience fields,
prompt tokens, behaviour log-probs). Exact reward values need replies the
random tiny model cannot write (``\\boxed{36}``, ``<think>...</think>``), so
those tests script the replies with ``ScriptedEngine`` (the tiny model's
tokenizer, fixed texts); they say so.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.workflows.scripted import ScriptedEngine, cycling
from trinity.common.config.schema import FormatConfig
from trinity.common.models.engine import SamplingParams
from trinity.common.models.hf_engine import HFEngine
from trinity.common.rewards import RewardOptionError, compute_reward
from trinity.common.workflows import WORKFLOWS, Task, WorkflowError, make_workflow
from trinity.common.workflows.catalog import UNAVAILABLE, unavailable_reason
from trinity.common.workflows.math_boxed import BOXED_PROMPT, BOXED_THINK_PROMPT
from trinity.common.workflows.math_eval import QWEN_BOXED_INSTRUCTION
from trinity.common.workflows.simple import R1_SYSTEM_PROMPT
from trinity.common.workflows.tool_call import tool_call_messages

UPSTREAM = {
    "simple_workflow": "SimpleWorkflow", "async_simple_workflow": "SimpleWorkflow",
    "math_workflow": "R1MathWorkflow", "async_math_workflow": "R1MathWorkflow",
    "math_boxed_workflow": "MathBoxedWorkflow", "async_math_boxed_workflow": "MathBoxedWorkflow",
    "math_eval_workflow": "MathEvalWorkflow", "async_math_eval_workflow": "MathEvalWorkflow",
    "tool_call_workflow": "ToolCallWorkflow", "frozen_lake_workflow": "FrozenLakeWorkflow",
    "sudoku_workflow": "SudokuWorkflow", "on_policy_distill_workflow": "OnPolicyDistillWorkflow",
    "on_policy_distill_math_workflow": "OnPolicyDistillMathWorkflow",
    "math_ruler_workflow": "MathRulerWorkflow", "async_math_ruler_workflow": "MathRulerWorkflow",
    "math_trainable_ruler_workflow": "MathTrainableRulerWorkflow",
}

TOOLS = [{"name": "get_weather", "description": "Weather of a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
TOOL_RECORD: dict[str, Any] = {
    "tools": json.dumps(TOOLS),
    "raw_system": "You are a helpful assistant.",
    "conversations": [{"from": "human", "value": "Weather in Paris?"},
                      {"from": "function_call", "value": {"name": "get_weather", "arguments": {"city": "Rome"}}},
                      {"from": "observation", "value": "sunny"},
                      {"from": "user", "value": "And Paris?"}],
    "answer": json.dumps([{"name": "get_weather", "arguments": {"city": "Paris"}}]),
}


@pytest.fixture(scope="module")
def engine(tiny_model: Path) -> Iterator[HFEngine]:
    """The tiny model with room for long system prompts (its tokenizer spends many tokens on English)."""
    yield HFEngine(str(tiny_model), max_prompt_tokens=1024, max_batch_size=16, torch_threads=1)


def check_experiences(engine: HFEngine, task: Task, experiences: list[Any], params: SamplingParams,
                      prompt_ids: list[int]) -> None:
    """Check the fields every single-turn workflow must get right, against the engine itself."""
    assert len(experiences) == task.repeat_times
    assert [e.run_id for e in experiences] == list(range(task.repeat_times))
    assert {e.group_id for e in experiences} == {task.group_id}
    scores = engine.score_tokens([prompt_ids] * len(experiences), [e.response_tokens.tolist() for e in experiences],
                                 params.temperature)
    for e, score in zip(experiences, scores, strict=True):
        assert e.tokens[: e.prompt_length].tolist() == prompt_ids
        assert 1 <= e.response_length <= params.max_tokens
        assert e.action_mask is not None and bool(e.action_mask.all())
        assert e.logprobs is not None and e.logprobs.shape == (e.response_length,)
        torch.testing.assert_close(e.logprobs, score, atol=2e-5, rtol=0)  # the behaviour log-probs are the engine's
        assert e.info["response"] == engine.tokenizer.decode(e.response_tokens.tolist(), skip_special_tokens=True)
        assert e.model_version == engine.model_version()


# ---------------------------------------------------------------- names


def test_upstream_names_are_declared_async_names_share_the_class() -> None:
    for name, cls in UPSTREAM.items():
        assert name in WORKFLOWS and WORKFLOWS.get(name).__name__ == cls
    assert WORKFLOWS.get("async_math_workflow") is WORKFLOWS.get("math_workflow")
    code = "import sys, trinity.common.workflows.catalog as c; c.unavailable_reason('x'); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"  # checking names imports no torch


def test_unavailable_upstream_names_say_why() -> None:
    for name in ("alfworld_workflow", "sciworld_workflow", "webshop_workflow", "agentscope_react_math_workflow",
                 "email_search_workflow", "math_rm_workflow", "rubric_judge_workflow",
                 "rm_gallery_reward"):
        reason = unavailable_reason(name)
        assert reason is not None and reason.startswith(name) and "\n" not in reason
        assert name not in WORKFLOWS
    assert "ALFWorld" in str(unavailable_reason("RAFT_alfworld_workflow"))  # names are case-insensitive
    assert "rm_gallery" in str(unavailable_reason("rm_gallery_reward"))
    assert unavailable_reason("math_workflow") is None and unavailable_reason("no_such_thing") is None
    assert unavailable_reason("simple_mm_workflow") is None  # images run here (tests/workflows/test_simple_mm.py)
    assert not set(UNAVAILABLE) & set(WORKFLOWS.names())


# ---------------------------------------------------------------- simple_workflow / math_workflow


def test_simple_workflow_on_the_tiny_model(engine: HFEngine) -> None:
    params = SamplingParams(temperature=0.8, max_tokens=10)
    task = Task(prompt="What is 2 plus 3?", answer="5", repeat_times=3, reward_fn="math_reward",
                system_prompt="Answer briefly.", index=4, step=2)
    workflow = make_workflow("simple_workflow", params)
    experiences = workflow.run(engine, task)
    messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 2 plus 3?"}]
    check_experiences(engine, task, experiences, params, engine.chat_prompt_tokens(messages))
    for e in experiences:  # the reward is the reward function's, on the reply text (and its parts the metrics)
        total, parts = compute_reward("math_reward", e.info["response"], "5")
        assert e.reward == total and e.info["reward_parts"] == parts
        assert e.info["metrics"] == {"accuracy": parts["math_reward/accuracy"],
                                     "format_score": parts["math_reward/format_score"]}
    with pytest.raises(WorkflowError, match="needs a reward function"):
        workflow.run(engine, Task(prompt="q", answer="1"))


def test_reply_prefix_is_continued_and_not_rewarded(engine: HFEngine) -> None:
    params = SamplingParams(temperature=1.0, max_tokens=6)
    task = Task(prompt="Say yes.", answer="yes", repeat_times=2, reward_fn="format_reward", reply_prefix="<think>\n",
                format=FormatConfig(reply_prefix="<think>\n"))
    workflow = make_workflow("simple_workflow", params)
    experiences = workflow.run(engine, task)
    text = engine.tokenizer.apply_chat_template([{"role": "user", "content": "Say yes."}], add_generation_prompt=True,
                                                tokenize=False)
    prompt_ids = engine.tokenizer(text + "<think>\n", add_special_tokens=False)["input_ids"]
    check_experiences(engine, task, experiences, params, prompt_ids)
    # scripted (the tiny model cannot write the format): the reward sees the continuation only, as upstream
    scripted = ScriptedEngine(engine.tokenizer, cycling(["reason\n</think>\n<answer>\nyes\n</answer>"]))
    (e,) = workflow.run(scripted, Task(prompt="Say yes.", answer="yes", reward_fn="format_reward",
                                       reply_prefix="<think>\n"))
    assert scripted.calls[0][0] == "generate_tokens"
    assert engine.tokenizer.decode(e.tokens[: e.prompt_length].tolist()).endswith("assistant\n<think>\n")
    assert e.reward == -0.1  # "<think>\n" is in the prompt, not the response: the pattern needs it in the reply


def test_math_workflow_system_prompt(engine: HFEngine) -> None:
    params = SamplingParams(temperature=1.0, max_tokens=8)
    workflow = make_workflow("math_workflow", params)
    task = Task(prompt="What is 1 plus 1?", answer="2", repeat_times=2)
    r1 = [{"role": "system", "content": R1_SYSTEM_PROMPT}, {"role": "user", "content": "What is 1 plus 1?"}]
    check_experiences(engine, task, workflow.run(engine, task), params, engine.chat_prompt_tokens(r1))
    # the task set's system prompt wins; another reward function gets no default system prompt, as upstream
    own = Task(prompt="q", answer="2", system_prompt="Be brief.")
    assert workflow.messages(own)[0] == {"role": "system", "content": "Be brief."}
    assert workflow.messages(Task(prompt="q", answer="2", reward_fn="math_accuracy")) == [
        {"role": "user", "content": "q"}]


def test_math_workflow_rewards_like_upstream(engine: HFEngine) -> None:
    # scripted: upstream's MathWorkflow test replies (the tiny model cannot write them)
    replies = ["\\boxed{2}", "\\boxted{3}", "2", "<think>\nThinking\n</think>\n<answer>\n3\n</answer>",
               "<think>\nThinking\n</think>\n<answer>\n\\boxed{2}\n</answer>",
               "<think>Missing closing</think><answer>\\boxed{2}", "<answer>\nOnly answer\n</answer>",
               "<think>\nOnly thinking\n</think>", "<think>Thinking</think><answer>Answer is not end</answer><answer>1"]
    scripted = ScriptedEngine(engine.tokenizer, cycling(replies))
    experiences = make_workflow("async_math_workflow").run(scripted, Task(prompt="1+1=", answer="2", repeat_times=9))
    assert [round(e.reward, 6) for e in experiences] == [0.9, -0.1, 0.9, 0.1, 1.1, 0.9, -0.1, -0.1, -0.1]
    assert experiences[4].info["metrics"] == {"accuracy": 1.0, "format_score": 0.1}


def test_reward_fn_args_reach_the_reward_function(engine: HFEngine) -> None:
    # scripted: a boxed answer of known token length; DAPO's overlong penalty counts the response tokens
    reply = "\\boxed{7}"
    scripted = ScriptedEngine(engine.tokenizer, cycling([reply]))
    length = len(engine.tokenizer(reply, add_special_tokens=False)["input_ids"]) + 1  # + EOS
    options = {"enable_overlong_penalty": True, "penalty_factor": 1.0, "max_response_length": length + 1,
               "cache_length": 2}
    task = Task(prompt="q", answer="7", reward_fn="math_dapo_reward", reward_fn_args=options)
    (e,) = make_workflow("simple_workflow").run(scripted, task)
    assert e.response_length == length
    assert e.reward == pytest.approx(1.0 - 0.5)  # expected length - 1 tokens over: half the penalty
    task.reward_fn_args = {"penalty": 1.0}
    with pytest.raises(RewardOptionError, match="takes no option 'penalty'"):
        make_workflow("simple_workflow").run(scripted, task)


# ---------------------------------------------------------------- math_boxed_workflow


def test_math_boxed_workflow_on_the_tiny_model(engine: HFEngine) -> None:
    params = SamplingParams(temperature=1.0, max_tokens=8)
    for with_think, prompt in ((False, BOXED_PROMPT), (True, BOXED_THINK_PROMPT)):
        workflow = make_workflow("math_boxed_workflow", params, {"with_think": with_think})
        task = Task(prompt="What is 3 plus 4?", answer="7", repeat_times=2)
        messages = [{"role": "system", "content": prompt}, {"role": "user", "content": "What is 3 plus 4?"}]
        experiences = workflow.run(engine, task)
        check_experiences(engine, task, experiences, params, engine.chat_prompt_tokens(messages))
        for e in experiences:
            assert e.reward == compute_reward("math_boxed_reward", e.info["response"], "7", with_think=with_think)[0]


def test_math_boxed_workflow_rewards_like_upstream(engine: HFEngine) -> None:
    # scripted: upstream's MathBoxedWorkflow test replies (the tiny model cannot write them)
    replies = ["<think> balabalabala 99 </think>\n \\boxed{36}", "answer is \\boxed{36 }",
               "Kim's total points are 6 + 30 =\\boxed{36}", "<think> balalaba </think> \\boxed{35.00}"]
    task = Task(prompt="", answer="36", repeat_times=4)
    for args, expected in (({"with_think": False, "format_score_coef": 0.2}, [1.0, 1.0, 1.0, 0.0]),
                           ({"with_think": True, "format_score_coef": 0.2}, [1.0, 0.8, 0.8, 0.0])):
        scripted = ScriptedEngine(engine.tokenizer, cycling(replies))
        experiences = make_workflow("math_boxed_workflow", None, args).run(scripted, task)
        assert [round(e.reward, 6) for e in experiences] == expected


def test_math_boxed_workflow_use_base_prompts_with_plain_text(engine: HFEngine) -> None:
    params = SamplingParams(temperature=1.0, max_tokens=6)
    workflow = make_workflow("math_boxed_workflow", params, {"use_base": True})
    task = Task(prompt="What is 3 plus 4?", answer="7", repeat_times=2)
    text = f"System:{BOXED_PROMPT}\nUser:\nWhat is 3 plus 4?\nAssistant:\n"
    check_experiences(engine, task, workflow.run(engine, task), params,
                      engine.tokenizer(text, add_special_tokens=True)["input_ids"])


# ---------------------------------------------------------------- math_eval_workflow


def test_math_eval_workflow(engine: HFEngine) -> None:
    params = SamplingParams(temperature=0.6, top_p=0.8, max_tokens=8)
    workflow = make_workflow("math_eval_workflow", SamplingParams(max_tokens=8))
    task = Task(prompt="What is 3 plus 4?", answer="7", repeat_times=2, is_eval=True)
    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": f"What is 3 plus 4?\n{QWEN_BOXED_INSTRUCTION}"}]
    experiences = workflow.run(engine, task)
    check_experiences(engine, task, experiences, params, engine.chat_prompt_tokens(messages))
    assert all(e.reward == 0.0 and set(e.info["metrics"]) == {"accuracy"} for e in experiences)
    # scripted: upstream's MathEvalWorkflow test replies (backspaces and all); it samples at T 0.6, top-p 0.8
    replies = ["My step-by-step reasoning leads to the answer \boxed{36}", "Here is the answer of \boxed{36.0}",
               "I made a mistake, the answer is \boxed{42}", "The answer is 36, but I forgot the box."]
    scripted = ScriptedEngine(engine.tokenizer, cycling(replies))
    experiences = workflow.run(scripted, Task(prompt="q", answer="36", repeat_times=4, is_eval=True))
    assert [e.info["metrics"]["accuracy"] for e in experiences] == [1.0, 1.0, 0.0, 0.0]
    assert [e.reward for e in experiences] == [0.0] * 4
    (_call, _count, used), = scripted.calls
    assert (used.temperature, used.top_p, used.n) == (0.6, 0.8, 4)


# ---------------------------------------------------------------- tool_call_workflow


def test_tool_call_messages_follow_tool_n1() -> None:
    messages = tool_call_messages(TOOL_RECORD)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "user"]
    assert messages[0]["content"].startswith("You are a helpful assistant.# Tool\n\n<tools>\n")
    assert json.dumps({"type": "function", "function": TOOLS[0]}) in messages[0]["content"]
    assert json.loads(messages[2]["content"]) == {"name": "get_weather", "arguments": {"city": "Rome"}}
    with pytest.raises(WorkflowError, match="no 'conversations' field"):
        tool_call_messages({"tools": "[]", "raw_system": ""})


def test_tool_call_workflow(engine: HFEngine) -> None:
    params = SamplingParams(temperature=1.0, max_tokens=6)
    workflow = make_workflow("tool_call_workflow", params)
    task = Task(prompt="", raw=TOOL_RECORD, repeat_times=2)
    experiences = workflow.run(engine, task)
    check_experiences(engine, task, experiences, params,
                      engine.chat_prompt_tokens(tool_call_messages(TOOL_RECORD)))
    # scripted (the tiny model cannot call tools): Tool-N1's rules
    call = '<tool_call>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</tool_call>'
    replies = [f"<think>Paris.</think> {call}", call, f"{call}<think>late</think>",
               '<think>x</think><tool_call>[{"name": "get_weather", "arguments": {"city": "Rome"}}]</tool_call>',
               '<think>x</think><tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>']
    scripted = ScriptedEngine(engine.tokenizer, cycling(replies))
    experiences = workflow.run(scripted, Task(prompt="", raw=TOOL_RECORD, repeat_times=5))
    assert [e.reward for e in experiences] == [1.0, 0.0, 0.0, 0.0, 1.0]


def test_agentscope_react_is_registered_and_says_what_it_needs() -> None:
    from trinity.common.workflows.agentscope_react import AgentScopeReActWorkflow
    from trinity.common.workflows.base import WorkflowError

    assert WORKFLOWS.get("agentscope_react_workflow") is WORKFLOWS.get("as_react_workflow") is AgentScopeReActWorkflow
    with pytest.raises(WorkflowError, match=r"task type 'sudoku' is not known; known: gsm8k \(workflow_args.type\)"):
        AgentScopeReActWorkflow(type="sudoku")


def test_agentscope_react_without_agentscope_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from trinity.common.workflows.agentscope_react import AgentScopeReActWorkflow
    from trinity.common.workflows.base import WorkflowError

    monkeypatch.setitem(sys.modules, "agentscope", None)  # what `import agentscope` meets when it is not installed
    with pytest.raises(WorkflowError, match=r"needs AgentScope.*pip install 'trinity-rft\[agentscope\]'"):
        AgentScopeReActWorkflow()
