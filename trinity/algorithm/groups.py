"""Per-group statistics of scalar rewards (GRPO-style groups of rollouts of one task)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class GroupStats:
    """Statistics of each row's group, broadcast back to the rows (all ``[B]``)."""

    #: Number of members of the row's group.
    size: torch.Tensor
    #: Sum of the rewards of the row's group.
    total: torch.Tensor
    #: Mean reward of the row's group.
    mean: torch.Tensor
    #: Sample standard deviation (divided by n - 1) of the row's group; 0 for a group of one.
    std: torch.Tensor


def group_stats(rewards: torch.Tensor, group_index: torch.Tensor) -> GroupStats:
    """Return the :class:`GroupStats` of each row of ``rewards`` [B] grouped by ``group_index`` [B].

    Group ids may be any integers (not necessarily 0..G-1 or contiguous rows).
    Raises ValueError when the tensors are not both 1-D of the same length.
    """
    if rewards.dim() != 1 or group_index.shape != rewards.shape:
        raise ValueError(
            f"rewards and group_index must both be [B], got {tuple(rewards.shape)} and {tuple(group_index.shape)}"
        )
    _, inverse = torch.unique(group_index, return_inverse=True)
    groups = int(inverse.max()) + 1 if inverse.numel() else 0
    zeros = rewards.new_zeros(groups)
    size = zeros.index_add(0, inverse, torch.ones_like(rewards))[inverse]
    total = zeros.index_add(0, inverse, rewards)[inverse]
    mean = total / size
    squares = zeros.index_add(0, inverse, (rewards - mean) ** 2)[inverse]
    std = torch.where(size > 1, squares / (size - 1).clamp(min=1), torch.zeros_like(squares)).sqrt()
    return GroupStats(size=size, total=total, mean=mean, std=std)


def group_log_mean_exp(rewards: torch.Tensor, group_index: torch.Tensor, tau: float) -> torch.Tensor:
    """Return ``tau * log(mean(exp(r / tau)))`` over each row's group, broadcast to the rows ([B]).

    This soft maximum of the group's rewards tends to the group mean as ``tau``
    grows and to the group maximum as ``tau`` shrinks. Computed stably (the group
    maximum is factored out). Raises ValueError for bad shapes or ``tau <= 0``.
    """
    if tau <= 0:
        raise ValueError(f"tau must be positive, got {tau}")
    stats = group_stats(rewards, group_index)
    _, inverse = torch.unique(group_index, return_inverse=True)
    groups = int(inverse.max()) + 1 if inverse.numel() else 0
    scaled = rewards / tau
    peak = scaled.new_zeros(groups).scatter_reduce(0, inverse, scaled, reduce="amax", include_self=False)[inverse]
    sums = scaled.new_zeros(groups).index_add(0, inverse, (scaled - peak).exp())[inverse]
    return tau * (peak + sums.log() - stats.size.log())


def group_inverse(index: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Return ``(inverse, count)``: each row's group as 0..count-1 (in order of first sorted id) and the group count."""
    _, inverse = torch.unique(index, return_inverse=True)
    return inverse, int(inverse.max()) + 1 if inverse.numel() else 0


def rank_in_group(values: torch.Tensor, group_index: torch.Tensor) -> torch.Tensor:
    """Return [B] each row's rank (0 = smallest value) among the rows of its group; ties go by row order."""
    same = group_index.unsqueeze(0) == group_index.unsqueeze(1)
    order = torch.arange(values.shape[0], device=values.device)
    smaller = (values.unsqueeze(0) < values.unsqueeze(1)) | (
        (values.unsqueeze(0) == values.unsqueeze(1)) & (order.unsqueeze(0) < order.unsqueeze(1))
    )
    return (same & smaller).sum(dim=1)
