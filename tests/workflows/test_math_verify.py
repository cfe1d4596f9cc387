"""Math answers compared symbolically with math-verify (the library upstream uses), through every math reward."""

# ruff: noqa: RUF001 - the Unicode math and Chinese punctuation are what is read

from __future__ import annotations

import pytest

from trinity.common.rewards import compute_reward
from trinity.common.rewards.math import answers_match, extract_answer
from trinity.common.rewards.math_eval import eval_extract_answer, verify_math_answer
from trinity.common.rewards.math_verify_check import chinese_answer, plus_minus_variants, symbolically_equal, to_latex

PM_EXPANDED = r"\frac{1}{2}\pm\frac{31\sqrt{5}}{216}"


@pytest.mark.parametrize(("candidate", "reference", "equal"), [
    ("(108±31√5)/216", PM_EXPANDED, True),
    (r"\frac{108\pm31\sqrt{5}}{216}", "(108±31√5)/216", True),
    ("(108+31√5)/216", "(108±31√5)/216", False),  # one of the two values is not both
    ("x=5", "5", True),
    (r"2\sqrt{2}", r"\sqrt{8}", True),
    ("0.5", r"\frac{1}{2}", True),
    ("答：共有24人", "24", True),
    ("答案为12个", "12", True),
    ("7", "5", False),
    ("", "5", False),
])
def test_symbolic_equality(candidate: str, reference: str, equal: bool) -> None:
    assert symbolically_equal(candidate, reference) is equal


def test_unicode_math_and_chinese_phrases_are_read() -> None:
    assert to_latex("(108±31√5)/216") == r"(108\pm 31\sqrt{5})/216"
    assert to_latex("√(x+1) × 2") == r"\sqrt{x+1} \times  2"
    assert plus_minus_variants(r"1\pm 2") == "$1+ 2, 1- 2$"
    assert plus_minus_variants(r"1\pm 2\pm 3") == r"1\pm 2\pm 3"  # more than one: left to the library
    assert chinese_answer("解：……所以答案是 $\\frac{1}{2}$。") == "$\\frac{1}{2}$"
    assert chinese_answer("no phrase") is None


def test_the_math_rewards_use_it() -> None:
    reply = "<think>\nsolve\n</think>\n<answer>\n$x = \\frac{108\\pm31\\sqrt{5}}{216}$\n</answer>"
    assert compute_reward("math_reward", reply, PM_EXPANDED)[1]["math_reward/accuracy"] == 1.0
    assert compute_reward("accuracy_reward", r"so $2\sqrt{2}$", r"\sqrt{8}")[0] == 1.0
    assert compute_reward("math_accuracy", "答案是 \\frac{3}{4}。", "0.75")[0] == 1.0
    assert verify_math_answer(r"\boxed{2\sqrt{2}}", r"\sqrt{8}") == 1.0
    assert answers_match("72", "72") and not answers_match("71", "72")


def test_extracting_from_a_non_string_gives_none() -> None:
    assert extract_answer(None) is None and extract_answer(72) is None  # type: ignore[arg-type]
    assert eval_extract_answer(None) is None  # type: ignore[arg-type]
    assert extract_answer("答案是 \\frac{3}{4}。") == "\\frac{3}{4}"


def test_a_check_past_its_timeout_is_not_equal(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    import math_verify

    def slow(*args: object, **kwargs: object) -> list[object]:
        time.sleep(1.0)
        return [1]

    monkeypatch.setattr(math_verify, "parse", slow)
    started = time.monotonic()
    assert symbolically_equal("1", "1", timeout=0.2) is False
    assert time.monotonic() - started < 0.9
