"""A chat request that continues a recorded one is prompted with the recorded tokens, not a fresh rendering.

An agent sends the whole conversation on every call: the earlier turns, the
model's replies as the client received them, and what came after (tool
results, the next user message). Rendering all of it again with the chat
template does not always give back the tokens the model saw and sampled:

* a reply whose text re-tokenises differently (a sampled token sequence that
  is not the tokenizer's own split of its text, bytes that are not UTF-8);
* a reply cut at ``max_tokens``, which the template closes with an end-of-turn
  token the model never sampled;
* a tool call, which the template writes in its own JSON layout.

The model would then continue a context it did not produce, and an episode's
experiences would split (nothing may be trained on tokens the model did not
sample). So when a session's request begins with a recorded request of the
same session and tools, followed by that record's reply exactly as it was
returned, the prompt is the record's prompt and response tokens followed by
the template's rendering of the rest: the end of the reply's turn that the
model did not sample, then the new messages and the generation prompt.
Templates that rewrite earlier turns once later ones exist (dropping old
reasoning, say) cannot be continued this way; those requests are rendered
afresh, as without a session.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from trinity.common.models.openai_api.history import RequestRecord
from trinity.common.models.openai_api.protocol import template_tool_calls

#: Stands for a reply's content while the template's end of an assistant turn is worked out.
_SENTINEL = "\u2063trinity-reply\u2063"


def context_key(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None) -> str:
    """Return a digest of a conversation (as the template sees it) and its tools."""
    text = json.dumps([list(tools or ()), list(messages)], sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def reply_message(content: str | None, tool_calls: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Return the assistant message a client sends back for a reply, normalised as the server reads messages."""
    message: dict[str, Any] = {"role": "assistant", "content": content or ""}
    if tool_calls:
        message["tool_calls"] = template_tool_calls(list(tool_calls), "reply")
    return message


def continued_prompt(engine: Any, records: Sequence[RequestRecord], messages: Sequence[Mapping[str, Any]],
                     tools: Sequence[Mapping[str, Any]] | None) -> list[int] | None:
    """Return the prompt of ``messages`` continuing the newest record they extend, or None when none does.

    ``engine`` renders (``chat_text``, ``text_tokens``, ``tokenizer``);
    ``messages`` are the request's normalised messages.
    """
    keys: dict[int, str] = {}
    for record in reversed(records):
        count = record.message_count
        if record.kind != "chat" or not record.context_key or len(messages) <= count:
            continue
        if count not in keys:
            keys[count] = context_key(messages[: count + 1], tools)
        if keys[count] == record.context_key:
            return _join(engine, record, messages, tools)
    return None


def _join(engine: Any, record: RequestRecord, messages: Sequence[Mapping[str, Any]],
          tools: Sequence[Mapping[str, Any]] | None) -> list[int] | None:
    count = record.message_count
    asked = engine.chat_text(messages[:count], tools, True)
    answered = engine.chat_text(messages[: count + 1], tools, False)
    whole = engine.chat_text(messages, tools, True)
    probe = engine.chat_text([*messages[:count], {"role": "assistant", "content": _SENTINEL}], tools, False)
    if not (answered.startswith(asked) and whole.startswith(answered) and probe.startswith(asked)):
        return None  # the template renders earlier turns differently once later ones exist
    turn = probe[len(asked):]
    at = turn.find(_SENTINEL)
    if at < 0:
        return None
    closing = turn[at + len(_SENTINEL):]
    closing = closing[_sampled_closing(engine.tokenizer, record.response_tokens.tolist(), closing):]
    glue = engine.text_tokens(closing + whole[len(answered):])
    return [*record.prompt_tokens.tolist(), *record.response_tokens.tolist(), *glue]


def _sampled_closing(tokenizer: Any, response: list[int], closing: str) -> int:
    """Return how many characters of the turn's ``closing`` the reply's final special tokens already are."""
    special = set(getattr(tokenizer, "all_special_ids", ()) or ())
    tail: list[int] = []
    for token in reversed(response):
        if token not in special:
            break
        tail.insert(0, token)
    if not tail:
        return 0
    text = str(tokenizer.decode(tail, skip_special_tokens=False))
    return len(text) if closing.startswith(text) else 0
