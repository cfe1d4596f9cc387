"""``countdown_reward``: the Countdown arithmetic game (TinyZero; upstream Trinity-RFT's ``CountDownRewardFn``).

The reference answer holds ``{"target": T, "numbers": [...]}`` (a mapping or
its JSON). The response's equation is the last ``<answer>...</answer>`` on its
*last line*. The reward is 1.0 when the equation uses every given number
exactly once and evaluates to the target (within 1e-5), 0.1 when there is an
equation that does not (a format reward), 0 when there is none.
Equations are evaluated by a small arithmetic interpreter (``+ - * /``,
parentheses, unary minus), never by ``eval``.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

from trinity.common.rewards.base import REWARD_FNS

#: Reward of a well-formed but wrong equation.
FORMAT_SCORE = 0.1
_ALLOWED_RE = re.compile(r"^[\d+\-*/().\s]+$")
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>")
_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
}


def countdown_equation(response: str) -> str | None:
    """Return the equation of ``response``: the last ``<answer>`` content on its last line, or None."""
    matches = _ANSWER_RE.findall(response.rsplit("\n", maxsplit=1)[-1])
    return matches[-1].strip() if matches else None


def uses_numbers(equation: str, numbers: list[int]) -> bool:
    """Return True when the integers in ``equation`` are exactly ``numbers`` (each once, any order)."""
    return sorted(int(n) for n in re.findall(r"\d+", equation)) == sorted(int(n) for n in numbers)


def evaluate_arithmetic(equation: str) -> float | None:
    """Return the value of an arithmetic expression (digits, ``+ - * /``, parentheses), or None if it is not one."""
    if not _ALLOWED_RE.match(equation):
        return None
    try:
        tree = ast.parse(equation.strip(), mode="eval")
        return _evaluate(tree.body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError):
        return None


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    raise ValueError(f"not plain arithmetic: {ast.dump(node)}")


def countdown_problem(answer: Any) -> tuple[float, list[int]]:
    """Return ``(target, numbers)`` of a Countdown reference answer; raises ValueError when it is not one."""
    try:
        data = json.loads(answer) if isinstance(answer, str) else answer
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, Mapping) or "target" not in data or "numbers" not in data:
        raise ValueError(
            f"countdown_reward needs a reference answer like {{\"target\": 24, \"numbers\": [...]}}, got {answer!r}"
        )
    return float(data["target"]), [int(n) for n in data["numbers"]]


@REWARD_FNS.register("countdown_reward")
def countdown_reward(response: str, answer: Any, **context: Any) -> float:
    """Return 1.0 for a correct equation, 0.1 for a wrong one, 0 for none (see the module docstring).

    Raises ValueError when ``answer`` is not a Countdown problem.
    """
    target, numbers = countdown_problem(answer)
    equation = countdown_equation(response)
    if equation is None:
        return 0.0
    if not uses_numbers(equation, numbers):
        return FORMAT_SCORE
    value = evaluate_arithmetic(equation)
    if value is None:
        return FORMAT_SCORE
    return 1.0 if abs(value - target) < 1e-5 else FORMAT_SCORE
