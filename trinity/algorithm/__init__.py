"""RL algorithms: advantage functions, policy losses, KL estimators, entropy, loss aggregation.

Every pluggable piece lives in a :class:`~trinity.common.registry.Registry`
under the name a config uses: :data:`ADVANTAGE_FNS`, :data:`POLICY_LOSS_FNS`,
:data:`KL_FNS`, :data:`LOSS_AGGREGATIONS` and :data:`ALGORITHMS`. Everything is
pure torch and works on whatever device its tensors are on.
"""

from trinity.algorithm.advantage import ADVANTAGE_FNS, AdvantageInputs, compute_advantages
from trinity.algorithm.aggregation import LOSS_AGGREGATIONS, aggregate
from trinity.algorithm.algorithms import ALGORITHMS, AlgorithmSpec, register_algorithm
from trinity.algorithm.entropy import entropy_bonus, entropy_from_logits
from trinity.algorithm.kl import KL_FNS, compute_kl, kl_loss, kl_reward_penalty
from trinity.algorithm.logprobs import token_logprobs
from trinity.algorithm.masked import masked_mean, masked_sum, masked_whiten
from trinity.algorithm.options import UnknownOptionError
from trinity.algorithm.policy_loss import POLICY_LOSS_FNS, PolicyLossInputs, compute_policy_loss, interleave_pairs
from trinity.algorithm.returns import discounted_returns, generalized_advantage_estimation, outcome_token_rewards

__all__ = [
    "ADVANTAGE_FNS",
    "ALGORITHMS",
    "KL_FNS",
    "LOSS_AGGREGATIONS",
    "POLICY_LOSS_FNS",
    "AdvantageInputs",
    "AlgorithmSpec",
    "PolicyLossInputs",
    "UnknownOptionError",
    "aggregate",
    "compute_advantages",
    "compute_kl",
    "compute_policy_loss",
    "discounted_returns",
    "entropy_bonus",
    "entropy_from_logits",
    "generalized_advantage_estimation",
    "interleave_pairs",
    "kl_loss",
    "kl_reward_penalty",
    "masked_mean",
    "masked_sum",
    "masked_whiten",
    "outcome_token_rewards",
    "register_algorithm",
    "token_logprobs",
]
