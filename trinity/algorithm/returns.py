"""Token-level rewards, discounted returns and Generalised Advantage Estimation on ``[B, T-1]`` tensors.

The time steps of a row are its response-mask positions, in order; masked
positions (prompt, padding, tool/environment tokens of multi-turn rollouts)
are not actions: they are skipped (neither rewarded nor discounted over) and
get 0 in every output.
"""

from __future__ import annotations

import torch

from trinity.algorithm.masked import as_mask, check_same_shape


def _zero(like: torch.Tensor) -> torch.Tensor:
    return torch.zeros((), dtype=like.dtype, device=like.device)


def outcome_token_rewards(rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Return ``[B, T-1]`` token rewards: each row's scalar reward at its last response token, 0 elsewhere.

    A row with an empty mask gets no reward. Raises ValueError unless
    ``rewards`` is [B] and ``response_mask`` is [B, T-1].
    """
    if rewards.dim() != 1 or response_mask.dim() != 2 or response_mask.shape[0] != rewards.shape[0]:
        raise ValueError(
            f"expected rewards [B] and response_mask [B, T-1], got {tuple(rewards.shape)} "
            f"and {tuple(response_mask.shape)}"
        )
    mask = as_mask(response_mask)
    if mask.shape[1] == 0:
        return rewards.new_zeros(mask.shape)
    positions = torch.arange(mask.shape[1], device=mask.device)
    last = torch.where(mask, positions, -1).amax(dim=-1)
    at_last = positions.unsqueeze(0) == last.unsqueeze(1)
    return torch.where(at_last, rewards.unsqueeze(1), _zero(rewards))


def discounted_returns(token_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """Return ``G_t = r_t + gamma * G_{t+1}`` over the response positions of each row ([B, T-1]), 0 elsewhere.

    Raises ValueError on mismatched shapes or ``gamma`` outside [0, 1].
    """
    check_same_shape(token_rewards=token_rewards, response_mask=response_mask)
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    mask = as_mask(response_mask)
    returns = torch.zeros_like(token_rewards)
    running = token_rewards.new_zeros(token_rewards.shape[0])
    for t in reversed(range(token_rewards.shape[1])):
        running = torch.where(mask[:, t], token_rewards[:, t] + gamma * running, running)
        returns[:, t] = torch.where(mask[:, t], running, _zero(running))
    return returns


def generalized_advantage_estimation(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(advantages, returns)`` by GAE (Schulman et al., 2016), both [B, T-1], 0 outside the mask.

    With ``delta_t = r_t + gamma * V_{t+1} - V_t`` (``V`` after the last response
    token is 0: the episode ends), ``A_t = delta_t + gamma * lam * A_{t+1}`` and
    ``returns = A + V``. Raises ValueError on mismatched shapes or ``gamma`` /
    ``lam`` outside [0, 1].
    """
    check_same_shape(token_rewards=token_rewards, values=values, response_mask=response_mask)
    for name, value in (("gamma", gamma), ("lam", lam)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {value}")
    mask = as_mask(response_mask)
    advantages = torch.zeros_like(token_rewards)
    next_value = token_rewards.new_zeros(token_rewards.shape[0])
    next_advantage = token_rewards.new_zeros(token_rewards.shape[0])
    for t in reversed(range(token_rewards.shape[1])):
        keep = mask[:, t]
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * lam * next_advantage
        next_advantage = torch.where(keep, advantage, next_advantage)
        next_value = torch.where(keep, values[:, t], next_value)
        advantages[:, t] = torch.where(keep, advantage, _zero(advantage))
    returns = torch.where(mask, advantages + values, _zero(advantages))
    return advantages, returns
