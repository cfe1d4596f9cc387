"""Upstream Trinity-RFT's reward functions (cases from upstream's own tests and hand-computed ones).

Upstream's ``math_reward``/``accuracy_reward`` check answers with the
``math_verify`` package; ours compare exact numbers and normalised text, so
the cases here are the ones both agree on.
"""

from __future__ import annotations

import json
import sys

import pytest

from trinity.common.rewards import (
    REWARD_FNS,
    RewardOptionError,
    check_reward_options,
    compute_reward,
    reward_options,
    verify_math_answer,
)
from trinity.common.rewards.countdown import evaluate_arithmetic
from trinity.common.rewards.math_eval import eval_extract_answer
from trinity.common.rewards.math_text import boxed_content, canonical_math, words_to_number
from trinity.utils.registry import UnknownNameError

UPSTREAM_REWARDS = ("math_reward", "math_boxed_reward", "format_reward", "countdown_reward", "accuracy_reward",
                    "math_dapo_reward")


def reward(name: str, response: str, answer: object, options: dict[str, object] | None = None,
           **context: object) -> float:
    total, _parts = compute_reward(name, response, answer, options=options, **context)
    return round(total, 6)


def test_every_upstream_reward_is_registered_and_ours_stay() -> None:
    assert set(UPSTREAM_REWARDS) | {"math_accuracy", "format", "toy_repeat"} <= set(REWARD_FNS.names())


def test_the_rewards_package_imports_no_torch() -> None:
    import subprocess

    code = ("import sys, trinity.common.rewards, trinity.common.workflows.catalog; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------- math_reward (upstream's workflow tests)


@pytest.mark.parametrize(
    ("response", "truth", "expected"),
    [
        ("\\boxed{2}", "2", 0.9),
        ("\\boxted{3}", "2", -0.1),
        ("2", "2", 0.9),
        ("<think>\nThinking\n</think>\n<answer>\n3\n</answer>", "2", 0.1),
        ("<think>\nThinking\n</think>\n<answer>\n\\boxed{2}\n</answer>", "2", 1.1),
        ("<think>Missing closing</think><answer>\\boxed{2}", "2", 0.9),
        ("<answer>\nOnly answer\n</answer>", "2", -0.1),
        ("<think>\nOnly thinking\n</think>", "2", -0.1),
        ("<think>Thinking</think><answer>Answer is not end</answer><answer>1", "2", -0.1),
        ("\\boxed{\\frac{1}{10}}", "\\frac{40}{400}", 0.9),
        ("\\boxed{0.1000}", "\\frac{40}{400}", 0.9),
        ("\\boxed{\\frac{1} {10}}", "\\frac{40}{400}", 0.9),
        ("<think> balabalabala 99 </think>\n<answer> 36 </answer>", "36", 1.1),
        ("<answer> 36.0 </answer>", "36", 0.9),
        ("<answer>Kim's total points are 6 + 30 = 36 </answer>", "36", 0.9),
        ("<think> balalaba </think><answer> 35.00 </answer>", "36", 0.1),
        ("<think> balalaba </think><answer> 35.00 </answer>", "35", 1.1),
    ],
)
def test_math_reward(response: str, truth: str, expected: float) -> None:
    assert reward("math_reward", response, truth) == expected


def test_math_reward_parts_and_pattern_option() -> None:
    _total, parts = compute_reward("math_reward", "<answer>7</answer>", "7")
    assert parts == {"math_reward": 0.9, "math_reward/accuracy": 1.0, "math_reward/format_score": -0.1}
    assert reward("math_reward", "<answer>7</answer>", "7", {"pattern": r"^<answer>.*</answer>$"}) == 1.1


# ---------------------------------------------------------------- math_boxed_reward


@pytest.mark.parametrize(
    ("response", "truth", "with_think", "expected"),
    [
        # upstream's math_boxed_workflow test (format_score_coef 0.2)
        ("<think> balabalabala 99 </think>\n \\boxed{36}", "36", False, 1.0),
        ("answer is \\boxed{36 }", "36", False, 1.0),
        ("Kim's total points are 6 + 30 =\\boxed{36}", "36", False, 1.0),
        ("<think> balalaba </think> \\boxed{35.00}", "36", False, 0.0),
        ("<think> balabalabala 99 </think>\n \\boxed{36}", "36", True, 1.0),
        ("answer is \\boxed{36 }", "36", True, 0.8),
        ("Kim's total points are 6 + 30 =\\boxed{36}", "36", True, 0.8),
        ("<think> balalaba </think> \\boxed{35.00}", "36", True, 0.0),
        # upstream's compute_score_v0 tests
        ("The final answer is \\boxed{42}", "The correct result is \\boxed{42}", False, 1.0),
        ("I think the answer is \\boxed{-1}", "The answer is \\boxed{1}", False, 0.0),
        ("The answer is \\boxed{apple}", "orange", False, 0.0),
        ("The answer is 42, but I'm not boxing it.", "42", False, 0.0),
        ("", "\\boxed{10}", False, 0.0),
        ("The answer is \\boxed{}", "", False, 1.0),
        ("The answer is \\boxed{1}", "", False, 0.0),
        ("First I thought it was \\boxed{A}, but then I realized it is \\boxed{B}", "\\boxed{B}", False, 1.0),
        ("First I thought it was \\boxed{A}, but then I realized it is \\boxed{B}", "\\boxed{A}", False, 0.0),
        # canonical forms
        ("\\boxed{\\dfrac{1}{2}}", "\\frac12", False, 1.0),
        ("\\boxed{1/2}", "\\frac{1}{2}", False, 1.0),
        ("\\boxed{x = 3}", "3", False, 1.0),
        ("\\boxed{5 \\text{ cm}}", "5", False, 1.0),
        ("\\boxed{twelve}", "12", False, 1.0),
    ],
)
def test_math_boxed_reward(response: str, truth: str, with_think: bool, expected: float) -> None:
    options = {"with_think": with_think, "format_score_coef": 0.2}
    assert reward("math_boxed_reward", response, truth, options) == expected


def test_math_boxed_reward_takes_its_settings_from_context_too() -> None:
    # math_boxed_workflow passes with_think / format_score_coef as context; reward_fn_args win over them
    assert reward("math_boxed_reward", "\\boxed{1}", "1", with_think=True, format_score_coef=0.5) == 0.5
    assert reward("math_boxed_reward", "\\boxed{1}", "1", {"format_score_coef": 0.25}, with_think=True,
                  format_score_coef=0.5) == 0.75


# ---------------------------------------------------------------- format_reward, accuracy_reward


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("<think>\nreason\n</think>\n<answer>\n42\n</answer>", 0.1),
        ("<think>reason</think><answer>42</answer>", -0.1),
        ("<think>\nreason\n</think>\n<answer>\n42\n</answer> extra", -0.1),
        ("no tags", -0.1),
    ],
)
def test_format_reward(response: str, expected: float) -> None:
    assert reward("format_reward", response, None) == expected


def test_format_reward_pattern_option() -> None:
    assert reward("format_reward", "<b>x</b>", None, {"pattern": r"<b>.*</b>"}) == 0.1


@pytest.mark.parametrize(
    ("response", "truth", "expected"),
    [
        ("so it is \\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("the result is $1/2$ and then $0.5$", "\\frac{1}{2}", 1.0),
        ("\\[ 12 \\]", "$12$", 1.0),
        ("The answer is 36", "36", 0.0),  # no LaTeX: nothing extracted, as upstream (no anchor-less extraction)
        ("\\boxed{35}", "36", 0.0),
    ],
)
def test_accuracy_reward(response: str, truth: str, expected: float) -> None:
    assert reward("accuracy_reward", response, truth) == expected


# ---------------------------------------------------------------- countdown_reward


COUNTDOWN = json.dumps({"target": 24, "numbers": [2, 3, 4]})


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("Let me think.\n<answer>(3 + 4 - 1) * 4</answer>", 0.1),  # numbers are not the given ones
        ("thinking\n<answer>2 * 3 * 4</answer>", 1.0),
        ("thinking\n<answer>(2 + 3) * 4</answer>", 0.1),  # right numbers, wrong value
        ("<answer>2 * 3 * 4</answer>\nbut I am not sure", 0.0),  # the equation must be on the last line
        ("no answer", 0.0),
        ("<answer>2 * 3 * 4</answer> <answer>4 * 3 * 2</answer>", 1.0),
        ("<answer>4 / (3 - 3) * 2</answer>", 0.1),
        ("<answer>import os</answer>", 0.1),
    ],
)
def test_countdown_reward(response: str, expected: float) -> None:
    assert reward("countdown_reward", response, COUNTDOWN) == expected
    assert reward("countdown_reward", response, json.loads(COUNTDOWN)) == expected


def test_countdown_arithmetic_is_interpreted_not_evaluated() -> None:
    assert evaluate_arithmetic("(1 + 2) * 3 / 4 - -1") == 3.25
    assert evaluate_arithmetic("2 ** 3") is None  # no power in Countdown
    assert evaluate_arithmetic("1 / 0") is None
    assert evaluate_arithmetic("__import__('os')") is None
    with pytest.raises(ValueError, match="target"):
        compute_reward("countdown_reward", "<answer>1</answer>", "not json")


# ---------------------------------------------------------------- math_dapo_reward


@pytest.mark.parametrize(
    ("response", "truth", "expected"),
    [
        ("<think>try \\boxed{3}</think> so \\boxed{42}", "42", 1.0),
        ("<think>it is \\boxed{42}</think> hmm, \\boxed{41}", "42", 0.0),
        ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("\\boxed{(1, 2)}", "(1,2)", 1.0),
        ("The answer is 42", "42", 0.0),  # no box: the whole text is graded
        ("42", "42", 1.0),
    ],
)
def test_math_dapo_reward_accuracy(response: str, truth: str, expected: float) -> None:
    assert reward("math_dapo_reward", response, truth, response_length=5) == expected


@pytest.mark.parametrize(("length", "penalty"), [(10, 0.0), (59, 0.0), (60, 0.0), (70, -0.5), (80, -1.0), (81, -1.0)])
def test_math_dapo_overlong_penalty(length: int, penalty: float) -> None:
    options = {"enable_overlong_penalty": True, "penalty_factor": 1.0, "max_response_length": 80,
               "cache_length": 20}
    # expected length 60: 0 up to it, then linear down to -penalty_factor at 80, and -penalty_factor beyond
    assert reward("math_dapo_reward", "\\boxed{1}", "2", options, response_length=length) == penalty
    assert reward("math_dapo_reward", "\\boxed{2}", "2", options, response_length=length) == 1.0 + penalty


def test_math_dapo_penalty_settings_are_checked() -> None:
    with pytest.raises(RewardOptionError, match="penalty_factor, max_response_length and cache_length"):
        compute_reward("math_dapo_reward", "x", "1", options={"enable_overlong_penalty": True}, response_length=3)
    with pytest.raises(RewardOptionError, match="greater than cache_length"):
        compute_reward("math_dapo_reward", "x", "1", options={
            "enable_overlong_penalty": True, "penalty_factor": 1.0, "max_response_length": 10, "cache_length": 10,
        }, response_length=3)
    assert reward("math_dapo_reward", "\\boxed{1}", "1") == 1.0  # no penalty: no length needed


# ---------------------------------------------------------------- options


def test_reward_options_are_keyword_only_parameters() -> None:
    assert reward_options(REWARD_FNS.get("math_dapo_reward")) == (
        "enable_overlong_penalty", "penalty_factor", "max_response_length", "cache_length")
    assert reward_options(REWARD_FNS.get("math_boxed_reward")) == ("with_think", "format_score_coef")
    assert reward_options(REWARD_FNS.get("math_accuracy")) == ()


def test_unknown_options_are_one_line_errors() -> None:
    with pytest.raises(RewardOptionError) as info:
        compute_reward("math_reward", "x", "1", options={"patern": "x"})
    message = str(info.value)
    assert "\n" not in message and "'patern'" in message and "pattern" in message and "reward_fn_args" in message
    with pytest.raises(RewardOptionError, match="its options: none"):
        check_reward_options("countdown_reward", {"x": 1})
    # with several functions, each gets the options it takes
    total, parts = compute_reward({"math_boxed_reward": 1.0, "format_reward": 1.0}, "\\boxed{1}", "1",
                                  options={"with_think": True, "pattern": r"\\boxed"})
    assert parts["math_boxed_reward/format_score"] == -0.1 and parts["format_reward/format_score"] == 0.1
    assert round(total, 6) == 1.0
    with pytest.raises(UnknownNameError):
        check_reward_options("no_such_reward", {})


def test_missing_reference_answers_are_errors() -> None:
    for name in ("math_reward", "math_boxed_reward", "accuracy_reward", "math_dapo_reward"):
        with pytest.raises(ValueError, match="reference answer"):
            compute_reward(name, "\\boxed{1}", None)


# ---------------------------------------------------------------- answer reading helpers


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("a \\boxed{1} b \\fbox{2}", "2"),
        ("\\boxed 7$ and", "7"),
        ("\\boxed{12", None),
        ("\\boxed", None),
        ("nothing", None),
    ],
)
def test_boxed_content(text: str, expected: str | None) -> None:
    assert boxed_content(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (" 36. ", "36"),
        ("\\dfrac{3}{4}", "\\frac{3}{4}"),
        ("\\frac34", "\\frac{3}{4}"),
        ("3/4", "\\frac{3}{4}"),
        ("\\left( 1, 2 \\right)", "1,2"),
        ("50\\%", "50"),
        ("x = 2.50", "2.50"),
        ("2.000", "2"),
        ("\\sqrt2", "\\sqrt{2}"),
        ("90^\\circ", "90"),
        ("\\text{forty-two}", "42"),
        ("", None),
    ],
)
def test_canonical_math(text: str, expected: str | None) -> None:
    assert canonical_math(text) == expected


def test_words_to_number() -> None:
    assert words_to_number("one hundred and twenty-three") == 123
    assert words_to_number("two thousand five") == 2005
    assert words_to_number("five apples") is None


# ---------------------------------------------------------------- math_eval_workflow's checker (upstream's tests)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is \\boxed{42}", "42"),
        ("The result is \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("Therefore, the final answer is 100.", "100"),
        ("My final answer is: 3.14", "3.14"),
        ("所以\uff0c答案是x^2", "x^2"),
        ("The cost is 10 dollars and the profit is 20 dollars.", "20"),
        ("There are 1,000 apples and 2,000 oranges.", "2000"),
        ("The probability is 0.75.", "0.75"),
        ("This sentence has no answer.", None),
        ("The box is empty \\boxed{}", None),
    ],
)
def test_eval_extract_answer(text: str, expected: str | None) -> None:
    assert eval_extract_answer(text) == expected


@pytest.mark.parametrize(
    ("response", "truth", "correct"),
    [
        ("The answer is \\boxed{42}", "42", True),
        ("The result is 1,000.", "1000", True),
        ("The answer is -50.", "-50", True),
        ("The solution is 5", "x=5", True),
        ("The answer is \\boxed{42}", "43", False),
        ("The answer is \\boxed{x+1}", "x-1", False),
        ("The matrix is \\boxed{\\begin{pmatrix}1 & 1 \\\\ 0 & 1\\end{pmatrix}}",
         "\\begin{pmatrix}1&0\\\\0&1\\end{pmatrix}", False),
        ("The speed is 50 km/h", "50", True),
        # upstream's math_eval_workflow test ("\b" is a backspace there: these are read for their last number)
        ("My step-by-step reasoning leads to the answer \boxed{36}", "36", True),
        ("Here is the answer of \boxed{36.0}", "36", True),
        ("I made a mistake, the answer is \boxed{42}", "36", False),
        ("The answer is 36, but I forgot the box.", "36", False),
        # the reference is read for its boxed or #### part
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}", True),
        ("\\boxed{0.5}", "so \\boxed{\\frac12}", True),
        ("\\boxed{72}", "48 + 24 = 72\n#### 72", True),
        ("\\boxed{(1, 2)}", "(1,2)", True),
        ("\\boxed{50}", "0.5", True),  # percentages, as upstream
    ],
)
def test_verify_math_answer(response: str, truth: str, correct: bool) -> None:
    assert verify_math_answer(response, truth) == (1.0 if correct else 0.0)
