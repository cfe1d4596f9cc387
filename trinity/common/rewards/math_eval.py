"""Strict math answer checking in the style of the Qwen2.5-Math evaluation (upstream's ``math_eval_workflow``).

:func:`verify_math_answer` extracts the final answer of a response
(:func:`eval_extract_answer`: the last ``\\boxed{}``, else "the/final answer
is ...", else the last number), reads the reference (its boxed part, the
part after ``####``, or all of it), brings both to :func:`canonical_math`
form and compares them with :func:`math_equal`: equal text, equal numbers
(relative tolerance 1e-4, percentages allowed: ``50`` matches ``0.5``),
intervals and matrices element by element, ``x = 5`` against ``5``.
Answers none of these finds equal are compared symbolically with
``math-verify`` (:mod:`~trinity.common.rewards.math_verify_check`).
"""

from __future__ import annotations

import math
import re

from trinity.common.rewards.math import to_number
from trinity.common.rewards.math_text import boxed_content, canonical_math
from trinity.common.rewards.math_verify_check import symbolically_equal

_ANSWER_IS = (re.compile(r"(?:final|the)\s+answer\s+is\s*:?\s*(.+)", re.IGNORECASE), re.compile(r"答案是\s*:?\s*(.+)"))
_LAST_NUMBER_RE = re.compile(r"[-+]?\d*\.?\d+")
_MATRIX = ("\\begin{pmatrix}", "\\end{pmatrix}")


def eval_extract_answer(text: str) -> str | None:
    """Return the canonical final answer of ``text`` (see the module docstring), or None when it has none
    (also for a ``text`` that is not a string)."""
    if not isinstance(text, str):
        return None
    if "boxed" in text:
        tail = text.rsplit("boxed", maxsplit=1)[-1]
        if not tail:
            return None
        if tail.startswith("{"):
            depth = 0
            for i, ch in enumerate(tail):
                depth += (ch == "{") - (ch == "}")
                if depth == 0:
                    return canonical_math(tail[1:i])
        found = re.search(r"\{?([^$}]+)\}?", tail)
        if found:
            return canonical_math(found.group(1))
    for pattern in _ANSWER_IS:
        found = pattern.search(text)
        if found:
            answer = canonical_math(found.group(1))
            return answer[:-1] if answer and answer.endswith(".") else answer
    numbers = _LAST_NUMBER_RE.findall(text.replace(",", ""))
    return numbers[-1] if numbers else None


def eval_reference(truth: object) -> str | None:
    """Return the canonical reference answer: the boxed part of ``truth``, the part after ``####``, or all of it."""
    text = str(truth)
    boxed = boxed_content(text)
    if boxed is not None:
        return canonical_math(boxed)
    if "####" in text:
        return canonical_math(text.rsplit("####", 1)[1])
    return canonical_math(text)


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        value = to_number(text)
        return float(value) if value is not None else None


def _numbers_equal(pred: str, ref: str) -> bool | None:
    a, b = _number(pred), _number(ref)
    if a is None or b is None:
        return None
    return any(math.isclose(a, candidate, rel_tol=1e-4) for candidate in (b, b / 100, b * 100))


def _structures_equal(pred: str, ref: str) -> bool | None:
    if pred[:1] in "([" and pred[-1:] in ")]" and ref[:1] in "([" and ref[-1:] in ")]" and len(pred) > 1:
        pred_parts, ref_parts = pred[1:-1].split(","), ref[1:-1].split(",")
        if len(pred_parts) == len(ref_parts) and all(
            math_equal(p.strip(), r.strip()) for p, r in zip(pred_parts, ref_parts, strict=True)
        ):
            return True
    if pred.startswith(_MATRIX[0]) and ref.startswith(_MATRIX[0]):
        rows_p = [row.split("&") for row in pred[len(_MATRIX[0]): -len(_MATRIX[1])].split("\\\\")]
        rows_r = [row.split("&") for row in ref[len(_MATRIX[0]): -len(_MATRIX[1])].split("\\\\")]
        if [len(r) for r in rows_p] == [len(r) for r in rows_r] and all(
            math_equal(p.strip(), r.strip())
            for row_p, row_r in zip(rows_p, rows_r, strict=True)
            for p, r in zip(row_p, row_r, strict=True)
        ):
            return True
    return None


def _equations_equal(pred: str, ref: str) -> bool | None:
    if pred.count("=") == 1 and "=" not in ref:
        name, value = (p.strip() for p in pred.split("="))
        if len(name) <= 2 and math_equal(value, ref):
            return True
    if ref.count("=") == 1 and "=" not in pred:
        name, value = (r.strip() for r in ref.split("="))
        if len(name) <= 2 and math_equal(pred, value):
            return True
    return None


def math_equal(prediction: str | None, reference: str | None) -> bool:
    """Return True when two canonical answers are equal as text, as numbers, element-wise or as ``x = value``."""
    if prediction is None or reference is None:
        return False
    if prediction == reference:
        return True
    for compare in (_numbers_equal, _structures_equal, _equations_equal):
        result = compare(prediction, reference)
        if result is not None:
            return result
    return symbolically_equal(prediction, reference)


def verify_math_answer(response: str, truth: object) -> float:
    """Return 1.0 when the final answer of ``response`` equals the reference ``truth`` (see the module), else 0.0."""
    return 1.0 if math_equal(eval_extract_answer(response), eval_reference(truth)) else 0.0
