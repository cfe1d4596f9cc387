"""Symbolic equality of math answers with ``math-verify``, the library upstream Trinity-RFT checks answers with.

:func:`symbolically_equal` parses both answers into sympy (LaTeX and plain
expressions) and asks ``math_verify.verify`` whether they are equal:
``\\frac{1}{2}`` equals ``0.5``, ``x = 5`` equals ``5``, ``2\\sqrt{2}``
equals ``\\sqrt{8}``. Before parsing, a text is brought to what the library
reads:

* Unicode math (``±``, ``√5``, ``×``, ``÷``, ``−``) becomes LaTeX;
* an answer with one ``\\pm`` becomes the set of its two values, so
  ``(108±31√5)/216`` equals ``\\frac{1}{2} \\pm \\frac{31\\sqrt{5}}{216}``;
* a Chinese answer phrase (``答案是``, ``答案为``, ``答案：``, ``答：``) keeps
  what follows it, its unit characters dropped (``答：共有24人`` reads 24).

Parsing and verifying run in a worker thread bounded by ``timeout`` seconds
(the library's own timeouts use signals, which only the main thread has); a
timeout counts as "not equal". The library is imported on first use.
"""

# ruff: noqa: RUF001, RUF002 - the Unicode math and Chinese punctuation are what is read

from __future__ import annotations

import concurrent.futures
import logging
import re
from typing import Any

logger = logging.getLogger(__name__)

_UNICODE = (("±", r"\pm "), ("∓", r"\mp "), ("×", r"\times "), ("÷", r"\div "), ("−", "-"), ("·", r"\cdot "),
            ("π", r"\pi "), ("∞", r"\infty "))
_SQRT_RE = re.compile(r"√\s*(\{[^{}]*\}|\([^()]*\)|\d+(?:\.\d+)?|[a-zA-Z])")
_CHINESE_ANSWER_RE = re.compile(r"(?:最终答案|答案)\s*(?:是|为|:|：)\s*|答\s*[:：]\s*")
_CHINESE_LEAD_RE = re.compile(r"^(?:共有|共|一共|总共|是|为)\s*")
_CJK_TAIL_RE = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef。，、！？]+.*$")
_PM_RE = re.compile(r"\\pm")

#: Seconds a parse or a comparison may take before it counts as "not equal".
DEFAULT_TIMEOUT = 5.0


def to_latex(text: str) -> str:
    """Return ``text`` with Unicode math written as LaTeX (``√5`` -> ``\\sqrt{5}``, ``±`` -> ``\\pm``)."""

    def sqrt(match: re.Match[str]) -> str:
        inner = match.group(1)
        if inner[0] in "{(":
            inner = inner[1:-1]
        return rf"\sqrt{{{inner}}}"

    text = _SQRT_RE.sub(sqrt, text)
    for symbol, latex in _UNICODE:
        text = text.replace(symbol, latex)
    return text


def chinese_answer(text: str) -> str | None:
    """Return what follows the last Chinese answer phrase of ``text`` (its unit characters dropped), or None."""
    matches = list(_CHINESE_ANSWER_RE.finditer(text))
    if not matches:
        return None
    rest = _CHINESE_LEAD_RE.sub("", text[matches[-1].end():].strip())
    rest = _CJK_TAIL_RE.sub("", rest).strip()
    return rest or None


def plus_minus_variants(text: str) -> str:
    """Return ``text`` with a single ``\\pm`` written as the list of its two values (``a + b, a - b``)."""
    if len(_PM_RE.findall(text)) != 1:
        return text
    body = text.strip().strip("$").strip()
    return f"${_PM_RE.sub('+', body)}, {_PM_RE.sub('-', body)}$"


def _prepared(text: str) -> list[str]:
    """Return the readings of ``text`` to try, best first."""
    latex = to_latex(text)
    readings = [plus_minus_variants(latex)]
    found = chinese_answer(latex)
    if found is not None:
        readings.insert(0, plus_minus_variants(found))
    return readings


def _call(fn: Any, timeout: float, *args: Any, **kwargs: Any) -> Any:
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="math-verify")
    try:
        return pool.submit(fn, *args, **kwargs).result(timeout=timeout)
    finally:
        pool.shutdown(wait=False)  # a check past its time is abandoned, not waited for


def _library() -> Any:
    import math_verify

    for fn in (math_verify.parse, math_verify.verify):  # its timeouts are ours (threads): no warning per call
        fn.__globals__["TIMEOUT_WARNING_SHOWN"] = True
    return math_verify


def _parse(text: str, timeout: float) -> list[Any]:
    parse = _library().parse
    for reading in _prepared(text):
        for candidate in (f"${reading.strip('$')}$", reading):
            parsed = _call(parse, timeout, candidate, parsing_timeout=None)
            if parsed:
                return list(parsed)
    return []


def symbolically_equal(candidate: str | None, reference: str | None, *, timeout: float = DEFAULT_TIMEOUT) -> bool:
    """Return True when math-verify finds ``candidate`` equal to ``reference`` (see the module docstring).

    False when either is missing, does not parse, or the check runs past ``timeout`` seconds.
    """
    if not isinstance(candidate, str) or not isinstance(reference, str) or not candidate.strip():
        return False
    verify = _library().verify
    try:
        gold, answer = _parse(reference, timeout), _parse(candidate, timeout)
        if not gold or not answer:
            return False
        return bool(_call(verify, timeout, gold, answer, timeout_seconds=None))
    except concurrent.futures.TimeoutError:
        logger.warning("math-verify took over %.0f s comparing %.80r with %.80r; counted as not equal",
                       timeout, candidate, reference)
        return False
    except Exception as exc:  # noqa: BLE001 - a parser failure on odd text is "not equal", as upstream counts it
        logger.debug("math-verify failed on %.80r vs %.80r: %s", candidate, reference, exc)
        return False


__all__ = ["DEFAULT_TIMEOUT", "chinese_answer", "plus_minus_variants", "symbolically_equal", "to_latex"]
