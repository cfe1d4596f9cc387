"""The reward of upstream's ``tool_call_workflow`` (Tool-N1: https://arxiv.org/abs/2505.00024).

A response earns 1.0 when it thinks first and then calls exactly the right
tools: one ``<think>`` and one ``</think>``, the think block before the first
``<tool_call>``, and the JSON list in the last ``<tool_call>...</tool_call>``
(a single object counts as a list of one) holding ``{"name", "arguments"}``
objects equal, as a multiset, to the reference calls. Anything else earns 0.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def last_tool_calls(response: str) -> list[Any] | None:
    """Return the JSON list in the last ``<tool_call>`` block of ``response`` (an object becomes a list), or None."""
    matches = _TOOL_CALL_RE.findall(response)
    if not matches:
        return None
    try:
        calls = json.loads(matches[-1].strip())
        if isinstance(calls, str):
            calls = json.loads(calls)
    except json.JSONDecodeError:
        return None
    if isinstance(calls, dict):
        return [calls]
    return calls if isinstance(calls, list) else None


def _call_key(call: dict[str, Any]) -> tuple[str, str]:
    return str(call["name"]), json.dumps(call["arguments"], sort_keys=True)


def same_calls(calls: list[Any], reference: list[Any]) -> bool:
    """Return True when ``calls`` and ``reference`` hold the same ``(name, arguments)`` calls, in any order."""
    if not calls or not reference:
        return len(calls) == len(reference)
    try:
        return Counter(_call_key(c) for c in calls) == Counter(_call_key(c) for c in reference)
    except (TypeError, KeyError):
        return False


def tool_call_score(response: str, truth: Any) -> float:
    """Return 1.0 when ``response`` thinks, then makes exactly the reference tool calls ``truth``; else 0.0.

    ``truth`` is the list of calls or its JSON. Raises ValueError when it is neither.
    """
    try:
        reference = json.loads(truth) if isinstance(truth, str) else truth
        if isinstance(reference, str):
            reference = json.loads(reference)
    except json.JSONDecodeError:
        raise ValueError(f"tool_call_workflow: the reference answer is not JSON: {str(truth)[:80]!r}") from None
    if isinstance(reference, dict):
        reference = [reference]
    if not isinstance(reference, list):
        raise ValueError(f"tool_call_workflow: the reference answer is not a list of calls: {str(truth)[:80]!r}")
    calls = last_tool_calls(response)
    if calls is None or response.count("<think>") != 1 or response.count("</think>") != 1:
        return 0.0
    first_call = response.find("<tool_call>")
    if response.find("</think>") > first_call >= 0:
        return 0.0
    if not all(isinstance(c, dict) and "name" in c and "arguments" in c for c in calls):
        return 0.0
    return 1.0 if same_calls(calls, reference) else 0.0
