"""Reward shapers (:data:`REWARD_SHAPERS`): functions from an experience's reward to a new reward.

Calling convention: ``shaper(reward, experience, **options) -> float``, with
the options keyword-only (checked against the signature, so a misspelt option
in a config is a one-line error). Shapers never see a missing reward: the
pipeline passes experiences without one through unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trinity.common.experience import Experience

#: ``(reward, experience, **options) -> shaped reward``
RewardShaper = Callable[..., float]

#: Reward shapers, by name.


def scale_reward(reward: float, experience: Experience, *, scale: float = 1.0, shift: float = 0.0) -> float:
    """Return ``reward * scale + shift``."""
    return reward * scale + shift


def length_penalty(
    reward: float, experience: Experience, *, coef: float = 0.001, free_tokens: int = 0, max_penalty: float = 0.0
) -> float:
    """Return ``reward - coef * max(0, generated - free_tokens)``, the penalty capped at ``max_penalty`` when > 0.

    ``generated`` counts the response tokens the policy generated (its action
    mask), so tool/environment tokens of multi-turn rollouts are not penalised.
    Raises ValueError for a negative ``coef`` or ``free_tokens``.
    """
    if coef < 0 or free_tokens < 0:
        raise ValueError(f"length_penalty needs coef >= 0 and free_tokens >= 0, got {coef} and {free_tokens}")
    assert experience.action_mask is not None
    generated = int(experience.action_mask.sum())
    penalty = coef * max(0, generated - free_tokens)
    if max_penalty > 0:
        penalty = min(penalty, max_penalty)
    return reward - penalty


def clip_reward(reward: float, experience: Experience, *, low: float = -1.0, high: float = 1.0) -> float:
    """Return ``reward`` clipped to ``[low, high]``; raises ValueError when ``low > high``."""
    if low > high:
        raise ValueError(f"clip needs low <= high, got low={low}, high={high}")
    return min(max(reward, low), high)
