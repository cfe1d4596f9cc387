"""A session's chat request that continues a recorded reply is prompted with the recorded tokens.

Built on the tiny model's real tokenizer and ChatML template (Hermes tool
calls), with the hf engine's rendering; the replies are written here, so
each case knows what the model "sampled".
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import torch

from trinity.common.models.hf_engine import HFEngine
from trinity.common.models.openai_api.continuation import context_key, continued_prompt, reply_message
from trinity.common.models.openai_api.history import RequestRecord
from trinity.common.workflows.agent import AgentWorkflow, Episode
from trinity.common.workflows.history import episode_experiences

ASK = [{"role": "user", "content": "Guess my number from 1 to 9."}]
AGAIN = {"role": "user", "content": "No. Try again."}
TOOLS = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}]


def record(engine: HFEngine, messages: list[dict], response: list[int], *, content: str | None = None,
           tool_calls: list[dict] | None = None, tools: list[dict] | None = None) -> RequestRecord:
    """Return the record the server writes for ``response`` sampled after ``messages``."""
    text = engine.tokenizer.decode(response, skip_special_tokens=True)
    reply = reply_message(text if content is None else content, tool_calls or [])
    return RequestRecord(
        kind="chat", request_id="r", choice=0, prompt_tokens=torch.tensor(engine.chat_prompt_tokens(messages, tools)),
        response_tokens=torch.tensor(response), logprobs=torch.zeros(len(response)), model_version=0,
        finish_reason="stop", text=text, request=messages, tool_calls=tool_calls or [],
        message_count=len(messages), context_key=context_key([*messages, reply], tools),
    )


def test_a_reply_that_ended_its_turn_continues_exactly_as_the_template_renders(shared_engine: HFEngine) -> None:
    engine = shared_engine
    end = engine.tokenizer.convert_tokens_to_ids("<|im_end|>")
    sampled = [*engine.text_tokens("It is 4."), end]
    first = record(engine, ASK, sampled)
    conversation = [*ASK, {"role": "assistant", "content": "It is 4."}, AGAIN]
    prompt = continued_prompt(engine, [first], conversation, None)
    # the reply re-tokenises to itself, so the continuation is the template's own rendering, token for token
    assert prompt == engine.chat_prompt_tokens(conversation)


def test_a_reply_cut_at_max_tokens_or_split_oddly_keeps_the_sampled_tokens(shared_engine: HFEngine) -> None:
    engine = shared_engine
    odd = engine.tokenizer.convert_tokens_to_ids(list("letter"))  # not as the tokenizer splits "letter"
    assert engine.text_tokens("letter") != odd
    first = record(engine, ASK, odd)  # no end of turn: cut at max_tokens
    conversation = [*ASK, {"role": "assistant", "content": "letter"}, AGAIN]
    prompt = continued_prompt(engine, [first], conversation, None)
    assert prompt is not None
    head = [*first.prompt_tokens.tolist(), *odd]
    assert prompt[: len(head)] == head
    rest = engine.tokenizer.decode(prompt[len(head):], skip_special_tokens=False)
    assert rest == "<|im_end|>\n<|im_start|>user\nNo. Try again.<|im_end|>\n<|im_start|>assistant\n"
    assert prompt != engine.chat_prompt_tokens(conversation)  # what rendering afresh would have prompted


def test_a_tool_call_is_continued_with_the_sampled_call_not_the_templates_layout(shared_engine: HFEngine) -> None:
    engine = shared_engine
    end = engine.tokenizer.convert_tokens_to_ids("<|im_end|>")
    written = '<tool_call>\n{"name":"calculator","arguments":{"expression":"2+3"}}\n</tool_call>'  # compact JSON
    call = {"id": "call_1", "type": "function",
            "function": {"name": "calculator", "arguments": '{"expression": "2+3"}'}}
    first = record(engine, ASK, [*engine.text_tokens(written), end], content="", tool_calls=[call], tools=TOOLS)
    conversation = [*ASK, {"role": "assistant", "content": "", "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "5"}]
    normalised = [*ASK, reply_message("", [call]), conversation[2]]
    prompt = continued_prompt(engine, [first], normalised, TOOLS)
    assert prompt is not None and prompt[: len(first.prompt_tokens) + len(first.response_tokens)] == torch.cat(
        [first.prompt_tokens, first.response_tokens]).tolist()
    rest = engine.tokenizer.decode(prompt[len(first.prompt_tokens) + len(first.response_tokens):],
                                   skip_special_tokens=False)
    assert rest.startswith("\n<|im_start|>user\n<tool_response>\n5\n</tool_response>")
    assert continued_prompt(engine, [first], normalised, None) is None  # other tools: another conversation


def test_a_changed_reply_or_a_template_that_rewrites_history_is_rendered_afresh(shared_engine: HFEngine) -> None:
    engine = shared_engine
    first = record(engine, ASK, engine.text_tokens("It is 4."))
    edited = [*ASK, {"role": "assistant", "content": "It is 5."}, AGAIN]
    assert continued_prompt(engine, [first], edited, None) is None
    forgetful = HFEngine.__new__(HFEngine)  # the same tokenizer, a template that drops earlier replies
    forgetful.tokenizer = engine.tokenizer
    forgetful.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
        "{% if m['role'] != 'assistant' or loop.last %}{{ m['content'] }}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    conversation = [*ASK, {"role": "assistant", "content": "It is 4."}, AGAIN]
    assert continued_prompt(forgetful, [first], conversation, None) is None


@pytest.fixture
def served(tiny_model: Path) -> Iterator[HFEngine]:
    engine = HFEngine(str(tiny_model), torch_threads=1, openai_api={
        "host": "127.0.0.1", "port": 0, "model_names": ["m"], "max_prompt_tokens": 1024, "context_length": 2048,
        "default_max_tokens": 12, "history": True})
    yield engine
    engine.shutdown()


def test_the_documented_agent_loop_joins_into_one_episode(served: HFEngine) -> None:
    """docs/agents.md's loop (replies appended with model_dump) on the random model: cut, odd replies."""
    client = openai.OpenAI(base_url=served.openai_api()["base_url"], api_key="none",
                           default_headers={"X-Trinity-Session": "episode-1"})
    messages: list[dict] = list(ASK)
    for _ in range(3):
        reply = client.chat.completions.create(model="m", messages=messages, max_tokens=12, temperature=1.0,
                                               seed=3).choices[0].message
        messages += [reply.model_dump(exclude_none=True), AGAIN]
    records, _ = served.take_history("episode-1")
    (episode,) = episode_experiences(records)
    assert episode.info["turns"] == 3
    assert int(episode.action_mask.sum()) == sum(len(r.response_tokens) for r in records)


class EditingAgent(AgentWorkflow):
    """An agent that rewrites the model's reply before sending it back: its episodes cannot stay one sequence."""

    def run_episode(self, client: Any, model: str, task: Any, episode: int) -> Episode:
        messages: list[dict[str, Any]] = list(ASK)
        for _ in range(2):
            reply = client.chat.completions.create(model=model, messages=messages, max_tokens=6).choices[0].message
            messages += [{"role": "assistant", "content": f"edited: {reply.content}"}, AGAIN]
        return Episode(reward=0.0)


def test_an_episode_that_cannot_join_is_logged_with_where_it_split(
        served: HFEngine, caplog: pytest.LogCaptureFixture) -> None:
    from trinity.common.models.client import EngineClient
    from trinity.common.workflows.base import Task

    task = Task(prompt="", answer="", repeat_times=2, index=7)
    with caplog.at_level(logging.WARNING, logger="trinity.common.workflows.agent"):
        made = EditingAgent(experience_mode="episode").run(EngineClient(served).bind(None), task)
    assert len(made) == 4  # 2 episodes x 2 calls, none joined
    split = [e.info["split_at"] for e in made if "split_at" in e.info]
    assert len(split) == 2 and all(0 < at < len(e.tokens) for at, e in zip(split, made[1::2], strict=True))
    assert f"task 7: 2 of 2 episode(s) split into several experiences; episode 0 into 2, its turn departing " \
           f"from the episode's tokens at token {split[0]}" in caplog.text
