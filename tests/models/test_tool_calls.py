"""The hermes tool-call parser, the API's request checks and the request history's bounds (no server needed)."""

from __future__ import annotations

import json

import pytest
import torch

from trinity.common.models.openai_api.history import HistoryBook, RequestRecord
from trinity.common.models.openai_api.protocol import ApiError, read_chat_request, read_completion_request
from trinity.common.models.openai_api.tool_calls import TOOL_CALL_PARSERS, parse_hermes


def test_hermes_reads_each_call_and_keeps_the_text_before_them() -> None:
    text = ('Let me compute.\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "6 * 7"}}\n'
            '</tool_call>\n<tool_call>{"name": "lookup", "arguments": "{\\"key\\": \\"x\\"}"}</tool_call>')
    parsed = parse_hermes(text)
    assert parsed.error is None and parsed.content == "Let me compute."
    assert [c.name for c in parsed.tool_calls] == ["calculator", "lookup"]
    assert [json.loads(c.arguments) for c in parsed.tool_calls] == [{"expression": "6 * 7"}, {"key": "x"}]
    assert len({c.id for c in parsed.tool_calls}) == 2
    assert TOOL_CALL_PARSERS.get("hermes") is parse_hermes


@pytest.mark.parametrize(("text", "error"), [
    ('<tool_call>\n{"name": "calculator", "arguments": {"expression"', "tool call 0 is not JSON"),
    ('<tool_call>{"arguments": {}}</tool_call>', 'tool call 0 has no "name" string'),
    ('<tool_call>{"name": "f", "arguments": [1]}</tool_call>', "tool call 0's arguments are not a JSON object"),
    ('<tool_call>{"name": "f"}</tool_call><tool_call>[]</tool_call>', 'tool call 1 has no "name" string'),
])
def test_a_reply_that_cannot_be_read_stays_text_and_says_why(text: str, error: str) -> None:
    parsed = parse_hermes(text)
    assert parsed.tool_calls == [] and parsed.content == text and parsed.error is not None
    assert parsed.error.startswith(error)


def test_text_without_a_call_is_content() -> None:
    parsed = parse_hermes("The answer is 42.")
    assert parsed.content == "The answer is 42." and parsed.tool_calls == [] and parsed.error is None


def test_chat_requests_are_read_into_template_ready_messages() -> None:
    request = read_chat_request({
        "model": "m", "n": 2, "temperature": 0.5, "top_k": -1, "max_completion_tokens": 9, "stop": "\n\n",
        "messages": [
            {"role": "developer", "content": [{"type": "text", "text": "be "}, {"type": "text", "text": "brief"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]},
            {"role": "tool", "tool_call_id": "c", "content": "2"},
        ],
    }, default_max_tokens=64)
    assert request.params.n == 2 and request.params.top_k == 0 and request.params.max_tokens == 9
    assert request.params.stop == ("\n\n",) and request.params.temperature == 0.5
    system, assistant, tool = request.messages
    assert system == {"role": "system", "content": "be brief"}
    assert assistant["content"] == "" and assistant["tool_calls"][0]["function"]["arguments"] == {"a": 1}
    assert tool == {"role": "tool", "content": "2", "tool_call_id": "c"}


@pytest.mark.parametrize(("body", "param"), [
    ({"messages": [{"role": "user", "content": "x"}], "top_p": 0}, "top_p"),
    ({"messages": [{"role": "user", "content": "x"}], "stop": [""]}, "stop"),
    ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, "top_logprobs"),
    ({"messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": True}}, "stream_options"),
    ({"messages": [{"role": "user", "content": "x"}], "tool_choice": "auto"}, "tool_choice"),
    ({"messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f",
                                                                                    "arguments": "{"}}]}]},
     "messages[0].tool_calls"),
])
def test_bad_chat_fields_are_named(body: dict, param: str) -> None:
    with pytest.raises(ApiError) as caught:
        read_chat_request(body, default_max_tokens=8)
    assert caught.value.status == 400 and caught.value.param == param


@pytest.mark.parametrize(("body", "param"), [
    ({"prompt": []}, "prompt"),
    ({"prompt": [[1, -2]]}, "prompt"),
    ({"prompt": "x", "echo": True}, "echo"),
    ({"prompt": "x", "n": 2, "best_of": 3}, "best_of"),
    ({"prompt": "x", "logprobs": 21}, "logprobs"),
])
def test_bad_completion_fields_are_named(body: dict, param: str) -> None:
    with pytest.raises(ApiError) as caught:
        read_completion_request(body, default_max_tokens=8)
    assert caught.value.param == param


def record(i: int) -> RequestRecord:
    return RequestRecord(kind="chat", request_id=f"r{i}", choice=0, prompt_tokens=torch.tensor([1, 2]),
                         response_tokens=torch.tensor([i]), logprobs=torch.tensor([-0.5]), model_version=0,
                         finish_reason="stop", text=str(i))


def test_the_history_book_is_bounded_and_counts_what_did_not_fit() -> None:
    book = HistoryBook(max_sessions=2, max_records=3)
    book.add("a", [record(0), record(1)])
    book.add("a", [record(2), record(3), record(4)])
    book.add("b", [record(5)])
    taken = book.take("a")
    assert [r.request_id for r in taken.records] == ["r0", "r1", "r2"] and taken.dropped == 2
    assert book.take("a").records == []  # taken once
    book.add("a", [record(6)])
    book.add("c", [record(7)])  # a third session: the oldest untouched ("b") goes
    assert book.take("b").records == [] and [r.request_id for r in book.take("a").records] == ["r6"]
    assert len(book) == 1
