"""Reward functions, registered by name in :data:`REWARD_FNS` (``math_accuracy``, ``format``, ``toy_repeat``)."""

from trinity.common.rewards.base import REWARD_FNS, RewardFn, compute_reward
from trinity.common.rewards.math import answers_match, extract_answer, format_reward, math_accuracy, reference_answer
from trinity.common.rewards.toy import toy_repeat_reward

__all__ = [
    "REWARD_FNS",
    "RewardFn",
    "answers_match",
    "compute_reward",
    "extract_answer",
    "format_reward",
    "math_accuracy",
    "reference_answer",
    "toy_repeat_reward",
]
