"""Reward functions, registered by name in :data:`REWARD_FNS`.

Ours: ``math_accuracy``, ``format``, ``toy_repeat``. Upstream's name of the
registry, :data:`REWARD_FUNCTIONS`, is the same registry, and upstream's
reward classes (:class:`RewardFn` subclasses) register in it beside the
functions (:mod:`~trinity.common.rewards.reward_fn`). Upstream Trinity-RFT's:
``math_reward``, ``math_boxed_reward``, ``format_reward``, ``accuracy_reward``
(:mod:`~trinity.common.rewards.math_rewards`), ``countdown_reward``
(:mod:`~trinity.common.rewards.countdown`), ``math_dapo_reward``
(:mod:`~trinity.common.rewards.dapo`). Importing this package imports no torch.
"""

from trinity.common.rewards.base import (
    REWARD_FNS,
    RewardFunction,
    RewardOptionError,
    RewardValue,
    check_reward_options,
    compute_reward,
    reward_options,
)
from trinity.common.rewards.countdown import countdown_reward
from trinity.common.rewards.dapo import math_dapo_reward
from trinity.common.rewards.math import answers_match, extract_answer, format_reward, math_accuracy, reference_answer
from trinity.common.rewards.math_eval import verify_math_answer
from trinity.common.rewards.math_rewards import accuracy_reward, format_reward_fn, math_boxed_reward, math_reward
from trinity.common.rewards.reward_fn import REWARD_FUNCTIONS, RewardFn, reward_class
from trinity.common.rewards.toy import toy_repeat_reward

__all__ = [
    "REWARD_FNS",
    "REWARD_FUNCTIONS",
    "RewardFn",
    "RewardFunction",
    "RewardOptionError",
    "RewardValue",
    "accuracy_reward",
    "answers_match",
    "check_reward_options",
    "compute_reward",
    "countdown_reward",
    "extract_answer",
    "format_reward",
    "format_reward_fn",
    "math_accuracy",
    "math_boxed_reward",
    "math_dapo_reward",
    "math_reward",
    "reference_answer",
    "reward_class",
    "reward_options",
    "toy_repeat_reward",
    "verify_math_answer",
]
