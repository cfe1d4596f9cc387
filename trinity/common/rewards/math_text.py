"""Reading math answers as text: the boxed answer of a response, and a canonical form for comparing answers.

:func:`canonical_math` is the string normalisation of the Hendrycks MATH
evaluation (as extended for Qwen2.5-Math), which upstream Trinity-RFT's
``math_boxed_reward`` and ``math_eval_workflow`` compare answers with: LaTeX
decoration, units, ``\\text{}``, dollar and percent signs and spaces are
removed, ``\\frac12``/``1/2`` become ``\\frac{1}{2}``, ``3.0`` becomes ``3``,
number words become digits, a leading ``x =`` goes. Two answers are equal
when their canonical forms are.
"""

from __future__ import annotations

import re

#: Unit words dropped from answers (and their plurals); single letters are kept (they are usually variables).
UNIT_WORDS = (
    "degree", "mph", "kmph", "kmh", "ft", "feet", "foot", "inch", "inches", "yard", "mile", "km", "cm", "mm",
    "meter", "metre", "sq", "square", "cubic", "cc", "kg", "gm", "gram", "lb", "pound", "gallon", "liter",
    "litre", "hour", "hr", "minute", "min", "second", "sec", "day", "week", "month", "year", "yr", "dollar",
    "cent", "percent", "unit", "rupee", "rs", "acre", "hectare", "am", "pm", "noon", "apple", "toy", "coin",
    "men", "man", "women", "woman", "students", "student", "ways", "way", "points", "point", "edges", "edge",
)
_UNITS_RE = re.compile(r"(^|\W)(?:" + "|".join(sorted({*UNIT_WORDS, *(w + "s" for w in UNIT_WORDS)},
                                                        key=len, reverse=True)) + r")(?=$|\W)")
_ONES = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen".split())}
_TENS = {w: 10 * (i + 2) for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())}
_SCALES = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}


def boxed_content(text: str) -> str | None:
    """Return the content of the last ``\\boxed{...}`` / ``\\fbox{...}`` of ``text`` (braces balanced), or None.

    ``\\boxed 5`` (a space, no braces) gives the text after it up to a ``$``;
    an unbalanced last box (a cut-off response) gives None.
    """
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    rest = text[start + (6 if text.startswith("\\boxed", start) else 5):]
    stripped = rest.lstrip()
    if stripped.startswith("{"):
        depth = 0
        for i, ch in enumerate(stripped):
            depth += (ch == "{") - (ch == "}")
            if depth == 0:
                return stripped[1:i]
        return None
    if stripped and len(stripped) < len(rest):  # "\boxed 5"
        return stripped.split("$")[0].strip()
    return None


def think_tags_valid(text: str) -> bool:
    """Return True when ``text`` has exactly one ``<think>`` and one ``</think>``, in that order."""
    return text.count("<think>") == 1 and text.count("</think>") == 1 and text.find("<think>") < text.find("</think>")


def words_to_number(text: str) -> int | None:
    """Return the integer an English number phrase names (``"twenty-one"`` -> 21), or None when it is not one."""
    words = [w for w in re.split(r"[\s\-]+", text.strip().lower()) if w and w != "and"]
    if not words:
        return None
    total = current = 0
    for word in words:
        if word in _ONES:
            current += _ONES[word]
        elif word in _TENS:
            current += _TENS[word]
        elif word == "hundred":
            current = max(current, 1) * 100
        elif word in _SCALES:
            total += max(current, 1) * _SCALES[word]
            current = 0
        else:
            return None
    return total + current


def _fix_fracs(text: str) -> str:
    """``\\frac12`` -> ``\\frac{1}{2}``, ``\\frac1{2}`` -> ``\\frac{1}{2}`` (braced arguments unchanged)."""
    pieces = text.split("\\frac")
    out = pieces[0]
    for piece in pieces[1:]:
        if piece.startswith("{"):
            out += "\\frac" + piece
        elif len(piece) < 2:
            return text  # "\frac" with nothing after it: leave the answer alone
        else:
            a, b, tail = piece[0], piece[1], piece[2:]
            out += "\\frac{" + a + "}" + (b + tail if b == "{" else "{" + b + "}" + tail)
    return out


def _fix_slash(text: str) -> str:
    """``3/4`` (integers) -> ``\\frac{3}{4}``."""
    match = re.fullmatch(r"(-?\d+)/(\d+)", text)
    return f"\\frac{{{match.group(1)}}}{{{match.group(2)}}}" if match else text


def canonical_math(text: str | None) -> str | None:
    """Return the canonical form of a math answer (see the module docstring); None for None or nothing left."""
    if text is None:
        return None
    s = str(text).strip().replace("\n", "").rstrip(".")
    for old, new in (("\\!", ""), ("\\$", ""), ("$", ""), ("\\%", ""), ("%", "")):
        s = s.replace(old, new)
    s = re.sub(r"\\begin\{array\}\{.*?\}", r"\\begin{pmatrix}", s)
    s = re.sub(r"\\end\{array\}", r"\\end{pmatrix}", s).replace("bmatrix", "pmatrix")
    for old, new in (("tfrac", "frac"), ("dfrac", "frac"), ("\\neq", "\\ne"), ("\\leq", "\\le"),
                     ("\\geq", "\\ge"), ("\\left", ""), ("\\right", ""), ("\\{", "{"), ("\\}", "}"),
                     ("\\mathbf", ""), ("^{\\circ}", ""), ("^\\circ", "")):
        s = s.replace(old, new)
    s = re.sub(r"\\mbox\{.*?\}", "", s)
    s = re.sub(r"\\text\{(.*?)\}", r"\1", s)
    for _ in range(2):
        without_units = _UNITS_RE.sub(r"\1", s)
        if without_units.strip():
            s = without_units
    number = words_to_number(s)
    if number is not None:
        s = str(number)
    s = re.sub(r"^[a-zA-Z]\s*=\s*", "", s)
    s = re.sub(r"(?<!\\)\b(?:infinity|inf)\b", r"\\infty", s)
    s = re.sub(r"(\d+)\.0+(?=[^\d]|$)", r"\1", s)
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if s.startswith("."):
        s = "0" + s
    s = s.replace(" ", "")
    s = re.sub(r"\\sqrt\s*(\w+)", r"\\sqrt{\1}", s)
    s = _fix_slash(_fix_fracs(s))
    if len(s) >= 2 and ((s[0], s[-1]) in (("{", "}"), ("(", ")"))):
        s = s[1:-1]
    return s.strip() or None


def same_math_text(a: str | None, b: str | None) -> bool:
    """Return True when ``a`` and ``b`` have the same canonical form (both None counts as equal, as upstream)."""
    return canonical_math(a) == canonical_math(b)
