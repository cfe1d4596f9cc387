"""Advantages from token rewards over time: GAE (PPO), REINFORCE++ and ReMax.

Token rewards are :meth:`~trinity.algorithm.advantage.AdvantageInputs.token_rewards`
(each reward on its row's last response token, or given per token, e.g. after
a KL penalty). Time runs over a row's response-mask positions only: masked
positions (tool or environment tokens of multi-turn rollouts) are neither
rewarded nor discounted over. Whitening uses the unbiased variance, as upstream.
"""

from __future__ import annotations

import torch

from trinity.algorithm.advantage import AdvantageInputs
from trinity.algorithm.masked import masked_whiten
from trinity.algorithm.returns import discounted_returns, generalized_advantage_estimation


def gae_advantages(
    inputs: AdvantageInputs, *, gamma: float = 1.0, lam: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return PPO's ``(advantages, returns)`` by Generalised Advantage Estimation from the critic ``values``.

    ``returns = GAE advantages + values`` (the critic's target, never
    whitened); the advantages are then whitened over the batch's response
    tokens. Raises ValueError without ``values`` or for ``gamma`` / ``lam``
    outside [0, 1].
    """
    values = inputs.require("values", "ppo")
    with torch.no_grad():
        advantages, returns = generalized_advantage_estimation(
            inputs.token_rewards(), values.detach(), inputs.response_mask, gamma, lam
        )
        return masked_whiten(advantages, inputs.response_mask, unbiased=True), returns


def reinforce_plus_plus_advantages(
    inputs: AdvantageInputs, *, gamma: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return REINFORCE++ ``(advantages, returns)``: discounted returns, whitened over the batch's response tokens.

    Raises ValueError for ``gamma`` outside [0, 1].
    """
    with torch.no_grad():
        returns = discounted_returns(inputs.token_rewards(), inputs.response_mask, gamma)
        return masked_whiten(returns, inputs.response_mask, unbiased=True), returns


def remax_advantages(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ReMax ``(advantages, returns)``: undiscounted returns minus the row's ``reward_baselines``.

    ``reward_baselines`` [B] is the reward of a greedy rollout of the same
    prompt (Li et al., 2023). Raises ValueError without ``reward_baselines``.
    """
    baselines = inputs.require("reward_baselines", "remax")
    with torch.no_grad():
        returns = discounted_returns(inputs.token_rewards(), inputs.response_mask, 1.0)
        advantages = torch.where(inputs.mask, returns - baselines.unsqueeze(1).to(returns.dtype), returns)
        return advantages, returns
