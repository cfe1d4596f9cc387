"""Reasoning parsers: split a thinking model's reply into ``reasoning_content`` and ``content``.

A parser is registered by the name a config gives in
``explorer.rollout_model.reasoning_parser`` (the names vLLM uses) and takes
the reply text. With a parser, the chat API answers ``message.reasoning_content``
(the thinking) beside ``message.content`` (the answer, where tool calls are
then looked for), and each recorded request keeps both texts, so the
experiences built from them say what was thought and what was answered.

* ``deepseek_r1``: everything before ``</think>`` is reasoning (a leading
  ``<think>`` dropped; DeepSeek-R1's template opens the tag in the prompt);
  a reply without ``</think>`` is all reasoning and has no content.
* ``qwen3``: reasoning only between a ``<think>`` and a ``</think>``; a reply
  without both is all content (Qwen3 with thinking turned off).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trinity.utils.registry import Registry

_OPEN, _CLOSE = "<think>", "</think>"


@dataclass(frozen=True)
class SplitReply:
    """A reply split by a reasoning parser."""

    #: The thinking, or None when the reply has none.
    reasoning: str | None
    #: The answer (what tool calls are parsed from); "" when the reply is all thinking.
    content: str


#: Reasoning parsers by config name.
REASONING_PARSERS: Registry[Callable[[str], SplitReply]] = Registry("reasoning parser", allow_import_path=False)


@REASONING_PARSERS.register("deepseek_r1")
def deepseek_r1(text: str) -> SplitReply:
    """Split at the first ``</think>``: before it is reasoning (no ``</think>``: all of it), after it the answer."""
    head, close, tail = text.partition(_CLOSE)
    stripped = head.lstrip()
    reasoning = stripped[len(_OPEN):] if stripped.startswith(_OPEN) else head
    if not close:
        return SplitReply(reasoning, "")
    return SplitReply(reasoning, tail.lstrip("\n"))


@REASONING_PARSERS.register("qwen3")
def qwen3(text: str) -> SplitReply:
    """Split a ``<think>...</think>`` block off the reply; without both tags the reply is all content."""
    start = text.find(_OPEN)
    end = text.find(_CLOSE, start + len(_OPEN)) if start >= 0 else -1
    if start < 0 or end < 0:
        return SplitReply(None, text)
    reasoning = text[start + len(_OPEN): end]
    return SplitReply(reasoning, (text[:start] + text[end + len(_CLOSE):]).lstrip("\n"))


__all__ = ["REASONING_PARSERS", "SplitReply", "deepseek_r1", "qwen3"]
