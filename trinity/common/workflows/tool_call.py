"""Upstream Trinity-RFT's ``tool_call_workflow`` (Tool-N1: https://github.com/NVlabs/Tool-N1).

A record holds ``tools`` (JSON list of function schemas), ``raw_system`` (the
system prompt), ``conversations`` (``[{"from": "human"|"user"|"gpt"|"assistant"|
"observation"|"tool"|"function_call", "value": ...}]``) and ``answer`` (the
expected calls, JSON). The system prompt is ``raw_system`` followed by the
tool list and the instructions to think in ``<think></think>`` and then call
tools as a JSON list in ``<tool_call></tool_call>``. Each reply earns
:func:`~trinity.common.rewards.tool_call.tool_call_score` (1 for exactly the
right calls after thinking, else 0); the task set's reward function is not used.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from trinity.common.models.engine import Completion
from trinity.common.rewards.tool_call import tool_call_score
from trinity.common.workflows.base import Task, WorkflowError
from trinity.common.workflows.single_turn import Messages, SingleTurnWorkflow

logger = logging.getLogger(__name__)

#: The tool-use instructions put after the record's system prompt (``{tools}``: one JSON schema a line).
TOOL_PROMPT = """# Tool

<tools>
{tools}
</tools>

In each action step, you MUST:
1. Think about the reasoning process in the mind and enclosed your reasoning within <think> </think> XML tags.
2. Then, provide a json object with function names and arguments within <tool_call></tool_call> XML tags. \
i.e., <tool_call>[{{"name": <function-name>, "arguments": <args-json-object>}}, \
{{"name": <function-name2>, "arguments": <args-json-object2>}}, ...]</tool_call>
3. Make sure both the reasoning and the tool call steps are included together in one single reply.
A complete reply example is: <think>To address the query, I need to send the email to Bob and then buy the \
banana through walmart. </think> <tool_call> [{{"name": "email", "arguments": {{"receiver": "Bob", "content": \
"I will bug banana through walmart"}}}}, {{"name": "walmart", "arguments": {{"input": "banana"}}}}]</tool_call>. \
Please make sure the type of the arguments is correct.
"""
_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
          "observation": "tool", "tool": "tool"}


def _field(record: Mapping[str, Any], key: str) -> Any:
    if key not in record:
        raise WorkflowError(f"tool_call_workflow: the task record has no {key!r} field (it has {sorted(record)})")
    return record[key]


def tool_call_messages(record: Mapping[str, Any]) -> Messages:
    """Return the conversation of a Tool-N1 record; raises WorkflowError for a missing field or bad ``tools``."""
    tools = _field(record, "tools")
    try:
        tools = json.loads(tools) if isinstance(tools, str) else tools
    except json.JSONDecodeError as exc:
        raise WorkflowError(f"tool_call_workflow: the record's 'tools' is not JSON ({exc.msg})") from None
    if not isinstance(tools, list):
        raise WorkflowError(f"tool_call_workflow: the record's 'tools' is not a list of schemas: {str(tools)[:80]!r}")
    listed = "\n".join(json.dumps({"type": "function", "function": tool}) for tool in tools)
    messages = [{"role": "system", "content": str(_field(record, "raw_system")) + TOOL_PROMPT.format(tools=listed)}]
    for turn in _field(record, "conversations"):
        source, value = turn.get("from"), turn.get("value")
        if source == "function_call":
            messages.append({"role": "assistant", "content": json.dumps(value)})
        elif source in _ROLES:
            messages.append({"role": _ROLES[source], "content": str(value)})
    return messages


class ToolCallWorkflow(SingleTurnWorkflow):
    """Tool-N1 tool calling: the record's conversation and tools in, 1 for exactly the right calls."""

    def messages(self, task: Task) -> Messages:
        """Return the Tool-N1 conversation of the task's record."""
        return tool_call_messages(task.raw)

    def reply_prefix(self, task: Task) -> str | None:
        """Return None: the record's conversation is the whole prompt."""
        return None

    def reward(self, task: Task, completion: Completion) -> tuple[float, dict[str, float]]:
        """Return the Tool-N1 score (0 with a warning when the record has no ``answer``)."""
        truth = task.raw.get("answer")
        if truth is None:
            logger.warning("tool_call_workflow: task %d has no 'answer' field; reward 0", task.index)
            return 0.0, {"tool_call": 0.0}
        score = tool_call_score(completion.text, truth)
        return score, {"tool_call": score}
