"""``math_dapo_reward``: DAPO's math reward with its overlong penalty (upstream Trinity-RFT's ``MathDAPORewardFn``).

``accuracy`` is 1.0 when the answer of the response, read after its last
``</think>`` (the last ``\\boxed{}`` there, else all of it), equals the
reference: the same canonical text, or the same number (relative tolerance
1e-4), element by element for tuples. ``format_score`` is DAPO's overlong
penalty when ``enable_overlong_penalty`` is set: 0 up to
``max_response_length - cache_length`` response tokens, then falling linearly
to ``-penalty_factor`` at ``max_response_length``, and ``-penalty_factor`` beyond.
The response length (in tokens) comes from the workflow as ``response_length``.
"""

from __future__ import annotations

from typing import Any

from trinity.common.rewards.base import REWARD_FNS, RewardOptionError
from trinity.common.rewards.math_eval import math_equal
from trinity.common.rewards.math_text import boxed_content, canonical_math


def dapo_answer_of(response: str) -> str:
    """Return the part of ``response`` DAPO grades: the last boxed answer after ``</think>``, else all of that."""
    tail = response.rsplit("</think>", maxsplit=1)[-1]
    boxed = boxed_content(tail)
    return boxed.strip() if boxed is not None else tail


def dapo_correct(response: str, truth: object) -> bool:
    """Return True when the DAPO answer of ``response`` equals ``truth`` (canonical text or number)."""
    candidate, reference = canonical_math(dapo_answer_of(response)), canonical_math(str(truth))
    if candidate is None or reference is None:
        return False
    return math_equal(candidate, reference) or _tuples_equal(candidate, reference)


def _tuples_equal(candidate: str, reference: str) -> bool:
    if "," not in reference or reference[:1] not in "([" or candidate[:1] != reference[:1]:
        return False
    inner_c, inner_r = candidate[1:-1].split(","), reference[1:-1].split(",")
    return len(inner_c) == len(inner_r) and all(math_equal(c, r) for c, r in zip(inner_c, inner_r, strict=True))


def overlong_penalty(response_length: int, *, penalty_factor: float, max_response_length: int,
                     cache_length: int) -> float:
    """Return DAPO's overlong penalty (0 or negative) of a response of ``response_length`` tokens.

    Raises RewardOptionError unless ``max_response_length > cache_length``.
    """
    if max_response_length <= cache_length:
        raise RewardOptionError(
            f"math_dapo_reward: max_response_length ({max_response_length}) must be greater than cache_length "
            f"({cache_length}); fix reward_fn_args"
        )
    expected = max_response_length - cache_length
    if response_length < expected:
        return 0.0
    if response_length > max_response_length:
        return -float(penalty_factor)
    return (expected - response_length) / cache_length * float(penalty_factor)


@REWARD_FNS.register("math_dapo_reward")
def math_dapo_reward(
    response: str,
    answer: Any,
    *,
    enable_overlong_penalty: bool | None = None,
    penalty_factor: float | None = None,
    max_response_length: int | None = None,
    cache_length: int | None = None,
    **context: Any,
) -> dict[str, float]:
    """Return ``accuracy`` (DAPO answer check) and ``format_score`` (the overlong penalty, 0 when disabled).

    Raises RewardOptionError when the penalty is enabled without
    ``penalty_factor``/``max_response_length``/``cache_length``, and ValueError
    when the workflow gave no ``response_length`` or the task no answer.
    """
    if answer is None:
        raise ValueError("math_dapo_reward needs a reference answer; set the task set's format.response_key")
    accuracy = 1.0 if dapo_correct(response, answer) else 0.0
    format_score = 0.0
    if enable_overlong_penalty:
        if penalty_factor is None or max_response_length is None or cache_length is None:
            raise RewardOptionError(
                "math_dapo_reward: enable_overlong_penalty needs penalty_factor, max_response_length and "
                "cache_length in reward_fn_args"
            )
        response_length = context.get("response_length")
        if response_length is None:
            raise ValueError("math_dapo_reward's overlong penalty needs response_length from the workflow; "
                             "use a workflow that passes it (simple_workflow, math_workflow, ...)")
        format_score = overlong_penalty(int(response_length), penalty_factor=penalty_factor,
                                        max_response_length=int(max_response_length), cache_length=int(cache_length))
    return {"accuracy": accuracy, "format_score": format_score}
