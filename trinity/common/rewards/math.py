"""Math answer checking: extract the final answer of a response, normalise it, compare with the reference.

Extraction tries, in order, and takes the *last* occurrence of the first kind found:

1. ``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced;
2. "The (final) answer is X" / "Answer: X" (to the end of the line, a trailing period dropped), else
   a Chinese answer phrase ("答案是 X", "答案为 X", "答：X");
3. "#### X" (GSM8K style);
4. the last number in the text.

Comparison: when both sides read as numbers (integers, decimals, ``a/b``,
``\\frac{a}{b}``, thousands separators, ``$``, ``%``, a trailing unit word),
they are compared exactly as fractions (``0.5 == 1/2``); otherwise as
normalised strings (LaTeX spacing and ``\\text{}`` removed, case folded);
failing both, symbolically with ``math-verify``, the library upstream uses
(:mod:`~trinity.common.rewards.math_verify_check`: ``2\\sqrt{2} == \\sqrt{8}``,
``x = 5 == 5``, ``(108±31√5)/216`` against its expanded form).
A reference answer is read the same way (GSM8K's ``... #### 72`` gives 72).
"""

# ruff: noqa: RUF002 - the Unicode math and Chinese punctuation are what is read

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from trinity.common.rewards.base import REWARD_FNS
from trinity.common.rewards.math_verify_check import chinese_answer, symbolically_equal

_NUMBER = r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+"
_NUMBER_RE = re.compile(_NUMBER)
_STANDALONE_NUMBER_RE = re.compile(rf"(?<![\w.^])(?:{_NUMBER})(?![\w^])")
_ANSWER_IS_RE = re.compile(r"(?:the\s+)?(?:final\s+)?answer\s*(?:is|:)\s*:?\s*([^\n]+)", re.IGNORECASE)
_HASHES_RE = re.compile(r"####\s*([^\n]+)")
_FRAC_RE = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_TEXT_RE = re.compile(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}")


def last_boxed(text: str) -> str | None:
    """Return the content of the last ``\\boxed{...}``/``\\fbox{...}`` in ``text`` (nested braces kept), or None."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    brace = text.find("{", start)
    if brace < 0:
        # "\boxed 5" without braces
        rest = text[start:].split(maxsplit=1)
        return rest[1].split()[0].rstrip(".$") if len(rest) > 1 else None
    depth = 0
    for i in range(brace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[brace + 1 : i]
    return None  # unbalanced: the response was cut off


def extract_answer(text: str) -> str | None:
    """Return the final answer written in ``text`` (see the module docstring), or None when there is none
    (also for a ``text`` that is not a string)."""
    if not isinstance(text, str):
        return None
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    matches = _ANSWER_IS_RE.findall(text)
    if matches:
        return _trim(matches[-1])
    chinese = chinese_answer(text)
    if chinese is not None:
        return _trim(chinese)
    matches = _HASHES_RE.findall(text)
    if matches:
        return _trim(matches[-1])
    numbers = _NUMBER_RE.findall(text)
    if numbers:
        return str(numbers[-1])
    return None


def reference_answer(answer: Any) -> str:
    """Return the comparable part of a reference answer: after the last ``####``, inside ``\\boxed{}``, or all of it."""
    text = str(answer).strip()
    if "####" in text:
        return _trim(text.rsplit("####", 1)[1])
    boxed = last_boxed(text)
    return boxed.strip() if boxed is not None else text


def _trim(text: str) -> str:
    text = text.strip()
    while text and text[-1] in ".;!":
        text = text[:-1].rstrip()
    return text.strip("$ ").strip()


def normalize(text: str) -> str:
    """Return ``text`` with LaTeX decoration, spaces and case removed (for non-numeric comparison)."""
    text = _FRAC_RE.sub(r"\1/\2", text)
    text = _TEXT_RE.sub(r"\1", text)
    for token in ("\\left", "\\right", "\\!", "\\,", "\\;", "\\ ", "$", "^\\circ", "^{\\circ}"):
        text = text.replace(token, "")
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    text = re.sub(r"\s+", "", text)
    return text.lower().rstrip(".")


def to_number(text: str) -> Fraction | None:
    """Return ``text`` as an exact number when it is one (``1,234``, ``-0.5``, ``3/4``, ``\\frac{3}{4}``, ``$7``).

    A number followed by a unit word (``72 dollars``) counts as the number;
    anything else (``x + 1``, two numbers) gives None.
    """
    cleaned = _FRAC_RE.sub(r"\1/\2", text)
    cleaned = _TEXT_RE.sub(r" \1", cleaned)
    cleaned = cleaned.replace("$", "").replace("\\%", "%").strip()
    cleaned = re.sub(r"(?:\s+[a-zA-Z]+\.?|\s*%|\s*°)+$", "", cleaned)  # trailing unit words, % and °
    cleaned = cleaned.replace(" ", "")
    if not re.fullmatch(_NUMBER, cleaned):
        return None
    if "," in cleaned and not re.fullmatch(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?", cleaned):
        return None  # "1,2" is a list, not a number
    cleaned = cleaned.replace(",", "")
    try:
        return Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        return None


def answers_match(candidate: str, reference: str) -> bool:
    """Return True when ``candidate`` equals ``reference`` as numbers (exactly) or as normalised strings."""
    a, b = to_number(candidate), to_number(reference)
    if a is not None and b is not None:
        return a == b
    if b is not None:  # "The answer is 72 apples and ..." : the first standalone number decides
        first = _STANDALONE_NUMBER_RE.search(candidate)
        if first is not None:
            value = to_number(first.group(0))
            return value is not None and value == b
    if normalize(candidate) == normalize(reference):
        return True
    return symbolically_equal(candidate, reference)


@REWARD_FNS.register("math_accuracy")
def math_accuracy(response: str, answer: Any, **context: Any) -> float:
    """Return 1.0 when the final answer of ``response`` matches the reference ``answer``, else 0.0."""
    if answer is None:
        raise ValueError("math_accuracy needs a reference answer; set the task set's answer_key")
    candidate = extract_answer(response)
    if candidate is None:
        return 0.0
    return 1.0 if answers_match(candidate, reference_answer(answer)) else 0.0


@REWARD_FNS.register("format")
def format_reward(response: str, answer: Any = None, **context: Any) -> float:
    """Return 1.0 when ``response`` states its final answer explicitly (boxed, "The answer is", ``####``), else 0.0."""
    if last_boxed(response) is not None or _ANSWER_IS_RE.search(response) or _HASHES_RE.search(response):
        return 1.0
    return 0.0
