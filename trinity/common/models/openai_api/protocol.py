"""Reading OpenAI API request bodies, and the OpenAI error object.

:func:`read_chat_request` and :func:`read_completion_request` check a decoded
JSON body field by field and return what the server needs, or raise
:class:`ApiError` naming the field, what was wrong, and the HTTP status
(always a 4xx for a client's mistake). Fields the OpenAI API defines that
these engines do not act on (``frequency_penalty``, ``user``, ...) are
accepted and ignored, as OpenAI-compatible servers usually do; fields that
would change the result and cannot be honoured (``tool_choice`` naming one
function, ``echo``) are refused. ``tool_choice: required`` is answered as
``auto``: the reply is parsed for calls, but nothing forces the model to make
one (agent libraries such as AgentScope ask again when none came).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trinity.common.models.engine import SamplingParams

_ROLES = ("system", "developer", "user", "assistant", "tool")


class ApiError(Exception):
    """A request the server refuses: the OpenAI error object and its HTTP status."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 kind: str = "invalid_request_error", code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.kind = kind
        self.code = code

    def body(self) -> dict[str, Any]:
        """Return the OpenAI error object (``{"error": {...}}``)."""
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@dataclass
class ChatRequest:
    """A checked ``/v1/chat/completions`` request."""

    model: str | None
    #: Messages ready for the chat template (text content, tool-call arguments as objects).
    messages: list[dict[str, Any]]
    #: The messages as sent (recorded in the history).
    raw_messages: list[Any]
    params: SamplingParams
    logprobs: bool = False
    top_logprobs: int = 0
    tools: list[dict[str, Any]] | None = None
    #: ``none`` or ``auto`` (with tools).
    tool_choice: str = "none"
    stream: bool = False
    include_usage: bool = False


@dataclass
class CompletionRequest:
    """A checked ``/v1/completions`` request."""

    model: str | None
    #: Each prompt as text or as token ids.
    prompts: list[str | list[int]]
    params: SamplingParams
    #: Top log-probs per token to return (0: only the sampled token's); None: no log-probs.
    logprobs: int | None = None
    stream: bool = False
    include_usage: bool = False


def decode_body(raw: bytes) -> dict[str, Any]:
    """Return the JSON object of a request body; raises ApiError 400 when it is not one."""
    try:
        body = json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def _number(body: Mapping[str, Any], key: str, default: Any, *, integer: bool = False,
            low: float | None = None, high: float | None = None, low_open: bool = False) -> Any:
    value = body.get(key)
    if value is None:
        return default
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise ApiError(400, f"{key} must be {kind}, got {json.dumps(value)}", param=key)
    if (low is not None and (value <= low if low_open else value < low)) or (high is not None and value > high):
        lower = "-inf" if low is None else low
        upper = "inf" if high is None else high
        bounds = f"{'(' if low_open else '['}{lower}, {upper}]"
        raise ApiError(400, f"{key} must be in {bounds}, got {value}", param=key)
    return value


def _flag(body: Mapping[str, Any], key: str) -> bool:
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ApiError(400, f"{key} must be true or false, got {json.dumps(value)}", param=key)
    return value


def _sampling(body: Mapping[str, Any], default_max_tokens: int) -> SamplingParams:
    stop = body.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stops = tuple(stop)
    else:
        raise ApiError(400, "stop must be a string or a list of strings", param="stop")
    if any(not s for s in stops):
        raise ApiError(400, "stop strings must not be empty", param="stop")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    max_tokens = _number({key: max_tokens}, key, default_max_tokens, integer=True, low=1)
    top_k = _number(body, "top_k", 0, integer=True, low=-1)
    return SamplingParams(
        temperature=float(_number(body, "temperature", 1.0, low=0, high=2)),
        top_p=float(_number(body, "top_p", 1.0, low=0, high=1, low_open=True)),
        top_k=max(0, top_k),  # -1 (vLLM) and 0 both mean no top-k
        max_tokens=int(max_tokens),
        n=int(_number(body, "n", 1, integer=True, low=1, high=128)),
        stop=stops,
        seed=_number(body, "seed", None, integer=True),
    )


def _stream_options(body: Mapping[str, Any], stream: bool) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not stream:
        raise ApiError(400, "stream_options is only allowed with stream: true", param="stream_options")
    if not isinstance(options, dict):
        raise ApiError(400, "stream_options must be an object", param="stream_options")
    return _flag(options, "include_usage")


def _text_content(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for number, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApiError(400, f"{where}.content[{number}]: only text parts ({{\"type\": \"text\", \"text\": "
                               "...}) are supported by this server", param=f"{where}.content")
            texts.append(part["text"])
        return "".join(texts)
    raise ApiError(400, f"{where}.content must be a string, a list of text parts or null", param=f"{where}.content")


def template_tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    """Return an assistant message's tool calls with their arguments as objects (what chat templates render)."""
    if not isinstance(calls, list):
        raise ApiError(400, f"{where}.tool_calls must be a list", param=f"{where}.tool_calls")
    out = []
    for number, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ApiError(400, f"{where}.tool_calls[{number}] needs function.name", param=f"{where}.tool_calls")
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError:
                raise ApiError(400, f"{where}.tool_calls[{number}].function.arguments is not JSON",
                               param=f"{where}.tool_calls") from None
        out.append({**call, "type": "function", "function": {"name": function["name"], "arguments": arguments}})
    return out


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list of message objects", param="messages")
    out = []
    for number, message in enumerate(messages):
        where = f"messages[{number}]"
        if not isinstance(message, dict):
            raise ApiError(400, f"{where} must be an object", param="messages")
        role = message.get("role")
        if role not in _ROLES:
            raise ApiError(400, f"{where}.role must be one of {', '.join(_ROLES)}, got {json.dumps(role)}",
                           param=f"{where}.role")
        clean: dict[str, Any] = {"role": "system" if role == "developer" else role,
                                 "content": _text_content(message.get("content"), where)}
        if role == "assistant" and message.get("tool_calls"):
            clean["tool_calls"] = template_tool_calls(message["tool_calls"], where)
        if role == "tool":
            if message.get("tool_call_id") is not None:
                clean["tool_call_id"] = str(message["tool_call_id"])
            if message.get("name") is not None:
                clean["name"] = str(message["name"])
        out.append(clean)
    return out


def _tools(body: Mapping[str, Any]) -> tuple[list[dict[str, Any]] | None, str]:
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if tools is None:
        if choice not in (None, "none"):
            raise ApiError(400, "tool_choice needs tools", param="tool_choice")
        return None, "none"
    if not isinstance(tools, list) or not all(
        isinstance(t, dict) and t.get("type", "function") == "function" and isinstance(t.get("function"), dict)
        and isinstance(t["function"].get("name"), str) for t in tools
    ):
        raise ApiError(400, "tools must be a list of {\"type\": \"function\", \"function\": {\"name\": ...}} objects",
                       param="tools")
    if choice in (None, "auto", "required"):  # required: parsed as auto, no guided decoding forces a call
        return tools, "auto"
    if choice == "none":
        return tools, "none"
    raise ApiError(400, f"tool_choice {json.dumps(choice)} is not supported: this server cannot force a call "
                   "(no guided decoding); use \"auto\" or \"none\"", param="tool_choice")


def read_chat_request(body: Mapping[str, Any], default_max_tokens: int) -> ChatRequest:
    """Check a ``/v1/chat/completions`` body; raises ApiError 400 naming the first bad field."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ApiError(400, "model must be a string", param="model")
    tools, tool_choice = _tools(body)
    logprobs = _flag(body, "logprobs")
    top_logprobs = int(_number(body, "top_logprobs", 0, integer=True, low=0, high=20))
    if top_logprobs and not logprobs:
        raise ApiError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
    stream = _flag(body, "stream")
    return ChatRequest(
        model=model, messages=_messages(body), raw_messages=list(body["messages"]),
        params=_sampling(body, default_max_tokens), logprobs=logprobs, top_logprobs=top_logprobs, tools=tools,
        tool_choice=tool_choice, stream=stream, include_usage=_stream_options(body, stream),
    )


def _prompts(value: Any) -> list[str | list[int]]:
    def is_ids(item: Any) -> bool:
        return isinstance(item, list) and bool(item) and all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in item)

    if isinstance(value, str):
        return [value]
    if is_ids(value):
        return [list(value)]
    if isinstance(value, list) and value and all(isinstance(p, str) or is_ids(p) for p in value):
        return list(value)
    raise ApiError(400, "prompt must be a string, a list of strings, a list of token ids or a list of such lists "
                   "(none empty)", param="prompt")


def read_completion_request(body: Mapping[str, Any], default_max_tokens: int) -> CompletionRequest:
    """Check a ``/v1/completions`` body; raises ApiError 400 naming the first bad field."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ApiError(400, "model must be a string", param="model")
    if _flag(body, "echo"):
        raise ApiError(400, "echo is not supported by this server", param="echo")
    if body.get("suffix") is not None:
        raise ApiError(400, "suffix is not supported by this server", param="suffix")
    params = _sampling(body, default_max_tokens)
    best_of = _number(body, "best_of", params.n, integer=True, low=1)
    if best_of != params.n:
        raise ApiError(400, "best_of other than n is not supported by this server", param="best_of")
    logprobs = _number(body, "logprobs", None, integer=True, low=0, high=20)
    stream = _flag(body, "stream")
    return CompletionRequest(model=model, prompts=_prompts(body.get("prompt")), params=params, logprobs=logprobs,
                             stream=stream, include_usage=_stream_options(body, stream))
