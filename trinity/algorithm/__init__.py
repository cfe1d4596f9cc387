"""RL algorithms: advantage functions, policy losses, KL estimators, entropy terms, loss aggregation.

Every pluggable piece lives in a registry under the name a config uses
(:data:`ADVANTAGE_FNS`, :data:`POLICY_LOSS_FNS`, :data:`KL_FNS`,
:data:`ENTROPY_LOSS_FNS`, :data:`LOSS_AGGREGATIONS`, :data:`ALGORITHMS`), all
owned by :mod:`trinity.algorithm.catalog`, which declares the built-ins
without importing them. Importing this package does not import torch: the
other names below are imported on first use. Everything numeric is pure torch
and works on whatever device its tensors are on.

Upstream Trinity-RFT's class API (``AdvantageFn``, ``GroupAdvantage``,
``PolicyLossFn``, ``KLFn``, ``EntropyLossFn``, ``AlgorithmType`` and the
registries ``ADVANTAGE_FN``, ``POLICY_LOSS_FN``, ``KL_FN``,
``ENTROPY_LOSS_FN``, ``ALGORITHM_TYPE``) is served on the same registries:
users' classes and the built-in functions are named alike in a config.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trinity.algorithm.catalog import (
    ADVANTAGE_FNS,
    ALGORITHMS,
    ENTROPY_LOSS_FNS,
    KL_FNS,
    LOSS_AGGREGATIONS,
    POLICY_LOSS_FNS,
)
from trinity.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from trinity.algorithm.advantage import AdvantageInputs, compute_advantages, compute_filtered_advantages
    from trinity.algorithm.advantage_fn import ADVANTAGE_FN, AdvantageFn, GroupAdvantage
    from trinity.algorithm.aggregation import aggregate
    from trinity.algorithm.algorithm import ALGORITHM_TYPE, AlgorithmType
    from trinity.algorithm.algorithms import AlgorithmSpec, register_algorithm
    from trinity.algorithm.entropy import entropy_bonus, entropy_from_logits, entropy_loss, nec_from_logits
    from trinity.algorithm.entropy_loss_fn import ENTROPY_LOSS_FN, EntropyLossFn
    from trinity.algorithm.group_filter import kept_rows
    from trinity.algorithm.kl import AdaptiveKLController, compute_kl, kl_loss, kl_reward_penalty
    from trinity.algorithm.kl_fn import KL_FN, KLFn
    from trinity.algorithm.logprobs import token_logprobs
    from trinity.algorithm.masked import masked_mean, masked_sum, masked_whiten
    from trinity.algorithm.options import UnknownOptionError
    from trinity.algorithm.policy_loss import PolicyLossInputs, compute_policy_loss, interleave_pairs
    from trinity.algorithm.policy_loss_fn import POLICY_LOSS_FN, PolicyLossFn
    from trinity.algorithm.returns import discounted_returns, generalized_advantage_estimation, outcome_token_rewards

_LAZY = {
    # upstream Trinity-RFT's class API (develop_algorithm.md), on the registries above
    "ADVANTAGE_FN": "advantage_fn",
    "ALGORITHM_TYPE": "algorithm",
    "AdvantageFn": "advantage_fn",
    "AlgorithmType": "algorithm",
    "ENTROPY_LOSS_FN": "entropy_loss_fn",
    "EntropyLossFn": "entropy_loss_fn",
    "GroupAdvantage": "advantage_fn",
    "KLFn": "kl_fn",
    "KL_FN": "kl_fn",
    "POLICY_LOSS_FN": "policy_loss_fn",
    "PolicyLossFn": "policy_loss_fn",
    # trinity-rft's own
    "AdaptiveKLController": "kl",
    "AdvantageInputs": "advantage",
    "AlgorithmSpec": "algorithms",
    "PolicyLossInputs": "policy_loss",
    "UnknownOptionError": "options",
    "aggregate": "aggregation",
    "compute_advantages": "advantage",
    "compute_filtered_advantages": "advantage",
    "compute_kl": "kl",
    "compute_policy_loss": "policy_loss",
    "discounted_returns": "returns",
    "entropy_bonus": "entropy",
    "entropy_from_logits": "entropy",
    "entropy_loss": "entropy",
    "generalized_advantage_estimation": "returns",
    "interleave_pairs": "policy_loss",
    "kept_rows": "group_filter",
    "kl_loss": "kl",
    "kl_reward_penalty": "kl",
    "masked_mean": "masked",
    "masked_sum": "masked",
    "masked_whiten": "masked",
    "nec_from_logits": "entropy",
    "outcome_token_rewards": "returns",
    "register_algorithm": "algorithms",
    "token_logprobs": "logprobs",
}

__getattr__, _lazy_dir = lazy_exports(__name__, _LAZY)

__all__ = [
    "ADVANTAGE_FN",
    "ADVANTAGE_FNS",
    "ALGORITHMS",
    "ALGORITHM_TYPE",
    "ENTROPY_LOSS_FN",
    "ENTROPY_LOSS_FNS",
    "KL_FN",
    "KL_FNS",
    "LOSS_AGGREGATIONS",
    "POLICY_LOSS_FN",
    "POLICY_LOSS_FNS",
    "AdaptiveKLController",
    "AdvantageFn",
    "AdvantageInputs",
    "AlgorithmSpec",
    "AlgorithmType",
    "EntropyLossFn",
    "GroupAdvantage",
    "KLFn",
    "PolicyLossFn",
    "PolicyLossInputs",
    "UnknownOptionError",
    "aggregate",
    "compute_advantages",
    "compute_filtered_advantages",
    "compute_kl",
    "compute_policy_loss",
    "discounted_returns",
    "entropy_bonus",
    "entropy_from_logits",
    "entropy_loss",
    "generalized_advantage_estimation",
    "interleave_pairs",
    "kept_rows",
    "kl_loss",
    "kl_reward_penalty",
    "masked_mean",
    "masked_sum",
    "masked_whiten",
    "nec_from_logits",
    "outcome_token_rewards",
    "register_algorithm",
    "token_logprobs",
]


def __dir__() -> list[str]:
    return sorted(set(__all__) | set(globals()))
