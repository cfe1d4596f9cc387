"""Final-answer extraction, normalisation and the math/format/toy reward functions."""

from __future__ import annotations

import pytest

from trinity.common.rewards import (
    REWARD_FNS,
    answers_match,
    compute_reward,
    extract_answer,
    format_reward,
    math_accuracy,
    reference_answer,
    toy_repeat_reward,
)
from trinity.utils.registry import UnknownNameError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so x = \\boxed{42}.", "42"),
        ("first \\boxed{1} then \\boxed{\\frac{3}{4}}", "\\frac{3}{4}"),
        ("nested \\boxed{\\sqrt{x^{2}}} done", "\\sqrt{x^{2}}"),
        ("The answer is 17.", "17"),
        ("the final answer is: $1,234.50$.", "1,234.50"),
        ("Answer: x + 1", "x + 1"),
        ("Natalia sold 48 clips.\n#### 72", "72"),
        ("we get 3, then 5 and finally -2.5", "-2.5"),
        ("no digits here", None),
        ("cut off \\boxed{12", "12"),  # unbalanced box: falls back to the last number
    ],
)
def test_extract_answer(text: str, expected: str | None) -> None:
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    ("candidate", "reference", "match"),
    [
        ("1,234", "1234", True),
        ("0.5", "1/2", True),
        ("\\frac{1}{2}", "0.5", True),
        ("\\dfrac{6}{4}", "3/2", True),
        ("72 dollars", "72", True),
        ("$7", "7.00", True),
        ("50%", "50", True),
        ("3", "4", False),
        ("1,2", "12", False),
        ("x + 1", "x+1", True),
        ("\\text{B}", "b", True),
        ("3x", "3", False),
    ],
)
def test_answers_match(candidate: str, reference: str, match: bool) -> None:
    assert answers_match(candidate, reference) is match


def test_math_accuracy_reads_gsm8k_references() -> None:
    assert reference_answer("She has 3 + 4 = 7 apples.\n#### 7") == "7"
    assert reference_answer("\\boxed{5}") == "5"
    assert math_accuracy("So the total is \\boxed{7}.", "blah\n#### 7") == 1.0
    assert math_accuracy("The answer is 7 apples.", 7) == 1.0
    assert math_accuracy("The answer is 8.", "7") == 0.0
    assert math_accuracy("I don't know", "7") == 0.0
    with pytest.raises(ValueError, match="reference answer"):
        math_accuracy("7", None)


def test_format_and_toy_rewards() -> None:
    assert format_reward("\\boxed{3}") == 1.0 and format_reward("The answer is 3") == 1.0
    assert format_reward("#### 3") == 1.0 and format_reward("3") == 0.0
    assert toy_repeat_reward("aaaa", "a") == 1.0
    assert toy_repeat_reward("abab", "a") == 0.5
    assert toy_repeat_reward("", "a") == 0.0
    assert toy_repeat_reward("AAA", "a") == 0.0
    with pytest.raises(ValueError, match="single-character"):
        toy_repeat_reward("aa", "aa")


def test_registry_and_weighted_combination() -> None:
    assert {"math_accuracy", "format", "toy_repeat"} <= set(REWARD_FNS.names())
    total, parts = compute_reward({"math_accuracy": 1.0, "format": 0.25}, "The answer is 9", "9")
    assert parts == {"math_accuracy": 1.0, "format": 1.0} and total == 1.25
    total, parts = compute_reward("math_accuracy", "\\boxed{8}", "9")
    assert (total, parts) == (0.0, {"math_accuracy": 0.0})
    with pytest.raises(UnknownNameError, match="math_accuracy"):
        compute_reward("math_acuracy", "x", "y")
