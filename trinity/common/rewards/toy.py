"""The reward of the ``toy_repeat`` task: how much of the response is the letter asked for."""

from __future__ import annotations

from typing import Any

from trinity.common.rewards.base import REWARD_FNS


@REWARD_FNS.register("toy_repeat")
def toy_repeat_reward(response: str, answer: Any, **context: Any) -> float:
    """Return the fraction of the response's characters equal to the target letter ``answer`` (0 when empty).

    The response is the text up to EOS (engines stop there). A random policy
    scores a few percent (some of its tokens contain the letter), a policy
    that answers only with the letter scores 1.
    """
    letter = str(answer)
    if len(letter) != 1:
        raise ValueError(f"toy_repeat needs a single-character answer, got {answer!r}")
    if not response:
        return 0.0
    return sum(ch == letter for ch in response) / len(response)
