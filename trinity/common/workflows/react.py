"""A ReAct agent written against the ``openai`` client: it reasons, calls tools, answers.

``react_agent`` answers arithmetic and look-up questions with two tools:
``calculator`` (an arithmetic expression: numbers, ``+ - * / // % **``,
parentheses) and ``lookup`` (a key in the task's ``facts`` object, else in
the workflow's ``facts`` argument). Each model reply either calls tools (their
results go back as ``tool`` messages) or is the final answer; an episode ends
at the answer or after ``max_env_steps`` replies. Reward 1 when the answer's
last number equals the task's answer, else 0; with ``judge: <name>``, 1 when
that auxiliary model (an engine of the run or an external endpoint) says
"yes" to the question, the reference and the answer (its calls are not
trained on).

Task records: ``question`` (the prompt key), ``answer``, optionally ``facts``.
Config: ``enable_openai_api``, ``enable_history``, ``enable_auto_tool_choice``
and ``tool_call_parser: hermes`` on the rollout model; ``multi_step_grpo``
(``experience_mode: step``) or ``grpo`` (``experience_mode: episode``).
"""

from __future__ import annotations

import ast
import json
import math
import operator
import re
from collections.abc import Mapping
from typing import Any

from trinity.common.models.engine import SamplingParams
from trinity.common.workflows.agent import AgentWorkflow, Episode
from trinity.common.workflows.base import Task, WorkflowError

SYSTEM_PROMPT = (
    "You answer questions step by step. Use the calculator for arithmetic and lookup for facts; "
    "when you know the answer, reply with it and no tool call."
)

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "calculator", "description": "Evaluate an arithmetic expression such as (2 + 3) * 4.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                       "required": ["expression"]},
    }},
    {"type": "function", "function": {
        "name": "lookup", "description": "Look up a fact by its key.",
        "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
    }},
]

_OPERATORS: dict[type, Any] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
    ast.USub: operator.neg, ast.UAdd: operator.pos,
}
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def calculate(expression: str) -> str:
    """Return the value of an arithmetic ``expression`` as text, or ``error: ...`` (never evaluates code)."""
    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 64:
                raise ValueError("exponent too large")
            return float(_OPERATORS[type(node.op)](left, right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return float(_OPERATORS[type(node.op)](value(node.operand)))
        raise ValueError(f"unsupported element {type(node).__name__}")

    try:
        result = value(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, RecursionError) as exc:
        return f"error: {exc}"
    if not math.isfinite(result):
        return "error: the result is not finite"
    return str(int(result)) if float(result).is_integer() else f"{result:.6g}"


def answer_matches(reply: str | None, answer: Any) -> bool:
    """Whether the last number in ``reply`` equals ``answer`` (numbers compared as numbers)."""
    numbers = _NUMBER.findall(reply or "")
    if not numbers or answer is None:
        return False
    try:
        return math.isclose(float(numbers[-1]), float(str(answer).strip()), rel_tol=1e-9, abs_tol=1e-9)
    except ValueError:
        return bool(numbers[-1] == str(answer).strip())


class ReActWorkflow(AgentWorkflow):
    """The ReAct calculator/lookup agent; see the module docstring."""

    def __init__(self, sampling: SamplingParams | None = None, *, experience_mode: str = "step",
                 max_env_steps: int = 4, facts: Mapping[str, Any] | None = None,
                 system_prompt: str = SYSTEM_PROMPT, judge: str | None = None) -> None:
        super().__init__(sampling, experience_mode=experience_mode, max_env_steps=max_env_steps)
        self.facts = dict(facts or {})
        self.system_prompt = system_prompt
        #: Name of the auxiliary model that judges the answer (None: compare numbers).
        self.judge = judge

    def judged_correct(self, task: Task, answer: str | None) -> bool:
        """Ask the judge model (through its OpenAI client) whether ``answer`` answers ``task``; True on "yes"."""
        if self.judge not in self.auxiliary:
            raise WorkflowError(f"react_agent: judge {self.judge!r} is not an auxiliary model of this run; "
                                f"known: {sorted(self.auxiliary) or 'none'} (explorer.auxiliary_models[].name)")
        client = self.auxiliary[self.judge].get_openai_client()  # type: ignore[attr-defined]
        verdict = client.chat.completions.create(model=client.model_path, temperature=0, max_tokens=8, messages=[
            {"role": "system", "content": "You check answers. Reply yes or no."},
            {"role": "user", "content": f"Question: {task.prompt}\nReference answer: {task.answer}\n"
                                        f"Given answer: {answer}\nIs the given answer correct?"},
        ])
        return "yes" in (verdict.choices[0].message.content or "").lower()

    def use_tool(self, name: str, arguments: str, task: Task) -> str:
        """Run tool ``name`` with its JSON ``arguments`` and return what the model is told."""
        try:
            args = json.loads(arguments or "{}")
        except json.JSONDecodeError:
            return "error: the arguments are not JSON"
        if not isinstance(args, dict):
            return "error: the arguments are not a JSON object"
        if name == "calculator":
            return calculate(str(args.get("expression", "")))
        if name == "lookup":
            facts = {**self.facts, **dict(task.raw.get("facts") or {})}
            key = str(args.get("key", ""))
            return str(facts[key]) if key in facts else f"error: no fact named {key!r}"
        return f"error: there is no tool named {name!r}"

    def run_episode(self, client: Any, model: str, task: Task, episode: int) -> Episode:
        """Ask, run the tools the model calls, repeat until it answers or the step limit."""
        messages: list[dict[str, Any]] = [{"role": "system", "content": self.system_prompt},
                                          {"role": "user", "content": str(task.prompt)}]
        answer, calls, failed = None, 0, 0
        for _ in range(self.max_env_steps):
            response = client.chat.completions.create(model=model, messages=messages, tools=TOOLS,
                                                      **self.request_options(task))
            message = response.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                answer = message.content
                break
            for call in message.tool_calls:
                result = self.use_tool(call.function.name, call.function.arguments, task)
                calls += 1
                failed += result.startswith("error:")
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        correct = self.judged_correct(task, answer) if self.judge else answer_matches(answer, task.answer)
        return Episode(1.0 if correct else 0.0, {
            "answer": answer, "tool_calls": calls,
            "metrics": {"tool_calls": float(calls), "tool_errors": float(failed), "answered": float(answer is not None),
                        "accuracy": float(correct)},
        })
