"""Reasoning parsers: the chat API answers a thinking model's reply as reasoning_content beside content, tool
calls are read from the answer only, and the recorded experience keeps both (real openai client over HTTP, a
copy of the tiny model taught to think before it calls a tool)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.models.teach import teach_replies
from tests.models.test_openai_api import QUESTION, TOOLS, api_options
from tests.plans import make_plan
from trinity.common.config import ConfigError
from trinity.common.models.client import EngineClient
from trinity.common.models.hf_engine import HFEngine
from trinity.common.models.openai_api.reasoning import REASONING_PARSERS, deepseek_r1, qwen3

THINKING = "I should add them."
CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2 + 3"}}\n</tool_call>'
REPLY = f"<think>\n{THINKING}\n</think>\n\n{CALL}"


@pytest.mark.parametrize(("text", "reasoning", "content"), [
    ("<think>\nplan\n</think>\n\nanswer", "\nplan\n", "answer"),
    ("plan</think>answer", "plan", "answer"),  # R1's template opens <think> in the prompt
    ("no tags at all", "no tags at all", ""),  # still thinking when cut off
])
def test_deepseek_r1_splits_at_the_end_of_thinking(text: str, reasoning: str, content: str) -> None:
    split = deepseek_r1(text)
    assert (split.reasoning, split.content) == (reasoning, content)


def test_qwen3_needs_both_tags() -> None:
    assert (qwen3("<think>plan</think>\nanswer").reasoning, qwen3("<think>plan</think>\nanswer").content) == \
        ("plan", "answer")
    assert (qwen3("plain answer").reasoning, qwen3("plain answer").content) == (None, "plain answer")
    assert set(REASONING_PARSERS.names()) == {"deepseek_r1", "qwen3"}


@pytest.fixture(scope="module")
def thinker(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return teach_replies(tiny_model, tmp_path_factory.getbasetemp() / "tiny-thinker", [(QUESTION, REPLY)],
                         tools=TOOLS)


@pytest.fixture(scope="module")
def engine(thinker: Path) -> Iterator[HFEngine]:
    served = HFEngine(str(thinker), max_batch_size=4, torch_threads=1, max_prompt_tokens=1024,
                      openai_api=api_options(thinker, reasoning_parser="deepseek_r1"))
    yield served
    served.shutdown()


def test_the_chat_api_answers_reasoning_beside_the_tool_call(engine: HFEngine) -> None:
    client = EngineClient(engine).bind(None)
    kwargs: dict[str, Any] = {"model": "rollout", "messages": QUESTION, "tools": TOOLS, "temperature": 0,
                              "max_tokens": 200}
    choice = client.get_openai_client().chat.completions.create(**kwargs).choices[0]
    assert choice.message.model_extra["reasoning_content"] == f"\n{THINKING}\n"
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert json.loads(call.function.arguments) == {"expression": "2 + 3"}
    reasoning, content = "", ""
    for chunk in client.get_openai_client().chat.completions.create(stream=True, **kwargs):
        for streamed in chunk.choices:
            reasoning += streamed.delta.model_extra.get("reasoning_content") or ""
            content += streamed.delta.content or ""
    assert reasoning == f"\n{THINKING}\n" and content == ""
    first, _ = client.extract_experience_from_history()
    assert first.info["reasoning_content"] == f"\n{THINKING}\n" and first.info["tool_calls"] == 1
    assert first.info["response"] == REPLY  # the tokens trained on are the whole reply, thinking included


def test_a_reasoning_parser_is_checked_with_the_config() -> None:
    with pytest.raises(ConfigError, match=r"reasoning_parser: 'deepseek' is not one of deepseek_r1, qwen3"):
        make_plan({"explorer.rollout_model.enable_openai_api": True,
                   "explorer.rollout_model.reasoning_parser": "deepseek"})
    with pytest.raises(ConfigError, match=r"reasoning_parser: applies to the OpenAI API"):
        make_plan({"explorer.rollout_model.reasoning_parser": "deepseek_r1"})
    plan = make_plan({"explorer.rollout_model.enable_openai_api": True,
                      "explorer.rollout_model.reasoning_parser": "qwen3"})
    assert plan.explorer.rollout.api is not None and plan.explorer.rollout.api.reasoning_parser == "qwen3"
