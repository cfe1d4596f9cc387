"""Tool-call parsers: turn a model's reply text into OpenAI ``tool_calls``.

A parser is registered by the name a config gives in
``explorer.rollout_model.tool_call_parser`` (the names vLLM uses). Each takes
the reply text and returns a :class:`ParsedReply`: the text left for
``message.content``, the tool calls found, and, when the reply looked like a
tool call but could not be read, why (the reply is then returned as plain text
and the recorded request says so, see ``RequestRecord.tool_call_error``).

``hermes`` reads the Hermes / Qwen2.5 format, one JSON object per call::

    <tool_call>
    {"name": "calculator", "arguments": {"expression": "2 + 3"}}
    </tool_call>
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trinity.utils.registry import Registry


@dataclass
class ToolCall:
    """One function call the model asked for."""

    name: str
    #: The arguments as a JSON object text (OpenAI sends them as a string).
    arguments: str
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    def as_openai(self) -> dict[str, Any]:
        """Return the OpenAI ``message.tool_calls`` item."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class ParsedReply:
    """A reply split into its text and its tool calls."""

    #: Text for ``message.content`` (None when the reply was only tool calls).
    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    #: Why a reply that looked like a tool call was returned as text instead; None when it parsed (or had none).
    error: str | None = None


#: Tool-call parsers by name: ``parser(text) -> ParsedReply``.
TOOL_CALL_PARSERS: Registry[Callable[[str], ParsedReply]] = Registry("tool-call parser")

_HERMES_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


def parse_hermes(text: str) -> ParsedReply:
    """Parse ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (Hermes, Qwen2.5)."""
    if "<tool_call>" not in text:
        return ParsedReply(content=text)
    calls: list[ToolCall] = []
    for number, match in enumerate(_HERMES_BLOCK.finditer(text)):
        body = match.group(1).strip()
        try:
            call = json.loads(body)
        except json.JSONDecodeError as exc:
            return ParsedReply(content=text, error=f"tool call {number} is not JSON ({exc.msg} at {exc.pos})")
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
            return ParsedReply(content=text, error=f"tool call {number} has no \"name\" string")
        arguments = call.get("arguments", call.get("parameters", {}))
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                return ParsedReply(content=text, error=f"tool call {number}'s arguments are not a JSON object")
        if not isinstance(arguments, dict):
            return ParsedReply(content=text, error=f"tool call {number}'s arguments are not a JSON object")
        calls.append(ToolCall(name=call["name"], arguments=json.dumps(arguments, ensure_ascii=False)))
    before = text[: text.index("<tool_call>")].strip()
    return ParsedReply(content=before or None, tool_calls=calls)


TOOL_CALL_PARSERS.add("hermes", parse_hermes)
