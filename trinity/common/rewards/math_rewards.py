"""Upstream Trinity-RFT's math rewards: ``math_reward``, ``math_boxed_reward``, ``accuracy_reward``, ``format_reward``.

They return named parts, as upstream's reward classes do (the reward is their sum):

* ``format_reward``: ``{"format_score": 0.1}`` when the whole response matches
  the pattern (option ``pattern``; default: ``<think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>``),
  else ``-0.1``.
* ``accuracy_reward``: ``{"accuracy": 1.0 | 0.0}``: the last ``\\boxed{}`` of the
  response, else its last ``$...$`` / ``\\(...\\)`` / ``\\[...\\]`` math, compared
  with the reference (numbers exactly, ``\\frac{1}{2} == 0.5``; text normalised).
* ``math_reward``: ``accuracy`` of the text inside ``<answer>...</answer>`` (the
  whole response when there is none) plus ``format_score`` (+0.1 when the response
  ends with ``<think>...</think> <answer>...</answer>``, option ``pattern``, else -0.1).
* ``math_boxed_reward``: ``accuracy`` (the last ``\\boxed{}`` against the reference,
  compared in :func:`~trinity.common.rewards.math_text.canonical_math` form) and
  ``format_score`` (``-format_score_coef`` when ``with_think`` and the
  ``<think></think>`` tags are not exactly one pair in order, else 0).

Answers are compared with :func:`~trinity.common.rewards.math.answers_match`:
exact numbers, normalised text, then symbolic equivalence with the
``math-verify`` package, which upstream checks ``accuracy_reward`` and
``math_reward`` with.
"""

from __future__ import annotations

import re
from typing import Any

from trinity.common.rewards.base import REWARD_FNS
from trinity.common.rewards.math import answers_match, extract_answer, reference_answer
from trinity.common.rewards.math_text import boxed_content, same_math_text, think_tags_valid
from trinity.common.rewards.math_verify_check import symbolically_equal

#: ``format_reward``'s default pattern (matched against the whole response, ``re.DOTALL | re.MULTILINE``).
FORMAT_PATTERN = r"^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>$"
#: ``math_reward``'s default format pattern.
MATH_FORMAT_PATTERN = r".*?<think>.*?</think>\s*<answer>.*?</answer>\s*$"
_ANSWER_TAG_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_INLINE_MATH_RE = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)


def _format_score(response: str, pattern: str) -> float:
    try:
        matched = re.match(pattern, response, re.DOTALL | re.MULTILINE)
    except re.error as exc:
        raise ValueError(
            f"format pattern {pattern!r} is not a valid regular expression ({exc}); fix reward_fn_args"
        ) from None
    return 0.1 if matched else -0.1


def _need_answer(name: str, answer: Any) -> str:
    if answer is None:
        raise ValueError(f"{name} needs a reference answer; set the task set's format.response_key")
    return str(answer)


def _is_correct(candidate: str | None, answer: str) -> float:
    return 1.0 if candidate is not None and answers_match(candidate.strip(), reference_answer(answer)) else 0.0


@REWARD_FNS.register("format_reward")
def format_reward_fn(
    response: str, answer: Any = None, *, pattern: str | None = None, **context: Any
) -> dict[str, float]:
    """Return ``{"format_score": 0.1}`` when ``response`` matches ``pattern`` (:data:`FORMAT_PATTERN`), else -0.1."""
    return {"format_score": _format_score(response, pattern or FORMAT_PATTERN)}


def math_answer_of(response: str) -> str | None:
    """Return the last boxed answer of ``response``, else the content of its last inline math, else None."""
    boxed = boxed_content(response)
    if boxed is not None:
        return boxed
    spans = _INLINE_MATH_RE.findall(response)
    if spans:
        return str(next(part for part in spans[-1] if part))
    return None


@REWARD_FNS.register("accuracy_reward")
def accuracy_reward(response: str, answer: Any, **context: Any) -> dict[str, float]:
    """Return ``{"accuracy": 1.0}`` when the response's boxed (else last inline) math equals the reference, else 0.0.

    Raises ValueError when the task has no reference answer.
    """
    return {"accuracy": _is_correct(math_answer_of(response), _need_answer("accuracy_reward", answer))}


@REWARD_FNS.register("math_reward")
def math_reward(response: str, answer: Any, *, pattern: str | None = None, **context: Any) -> dict[str, float]:
    """Return ``accuracy`` of the ``<answer>`` text (or the whole response) and ``format_score`` (+/-0.1).

    Raises ValueError when the task has no reference answer.
    """
    truth = _need_answer("math_reward", answer)
    tagged = _ANSWER_TAG_RE.search(response)
    text = tagged.group(1) if tagged else response
    accuracy = _is_correct(extract_answer(text), truth)
    if not accuracy and tagged:  # upstream reads the whole <answer> text as math (``x = \frac{...}{...}``)
        accuracy = float(symbolically_equal(text.strip(), reference_answer(truth)))
    return {"accuracy": accuracy,
            "format_score": _format_score(response, pattern or MATH_FORMAT_PATTERN)}


@REWARD_FNS.register("math_boxed_reward")
def math_boxed_reward(
    response: str, answer: Any, *, with_think: bool = False, format_score_coef: float = 0.1, **context: Any
) -> dict[str, float]:
    """Return ``accuracy`` of the last ``\\boxed{}`` (canonical text equality) and ``format_score``.

    ``format_score`` is ``-format_score_coef`` when ``with_think`` and the
    think tags are not one ordered pair, else 0. Raises ValueError when the
    task has no reference answer.
    """
    truth = _need_answer("math_boxed_reward", answer)
    candidate = boxed_content(response)
    reference = boxed_content(truth)
    accuracy = 1.0 if candidate is not None and same_math_text(candidate, truth if reference is None else reference) \
        else 0.0
    format_score = -float(format_score_coef) if with_think and not think_tags_valid(response) else 0.0
    return {"accuracy": accuracy, "format_score": format_score}
