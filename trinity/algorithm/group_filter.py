"""Dropping the groups an advantage function skips (upstream's ``std_threshold``), in the buffer.

``grpo`` and ``step_wise_grpo`` with ``std_threshold`` give the rows of a
skipped group advantage 0; upstream also removes them from the batch, and
``grpo`` with ``duplicate_experiences`` refills the batch with copies of
random kept groups. :func:`kept_rows` says which rows to keep, in order.
"""

from __future__ import annotations

import torch

from trinity.algorithm.groups import group_inverse, group_stats


def skipped_groups(
    rewards: torch.Tensor, group_index: torch.Tensor, std_threshold: float, run_index: torch.Tensor | None = None
) -> torch.Tensor:
    """Return [B] True for rows of a group to skip: one member, or a reward std (n - 1) at most ``std_threshold``.

    With ``run_index`` (multi-step episodes), a group's members are its
    episodes and each episode's reward is that of its last row. Raises
    ValueError for mismatched shapes.
    """
    if rewards.dim() != 1 or group_index.shape != rewards.shape:
        raise ValueError(f"rewards and group_index must be [B], got {tuple(rewards.shape)}, {tuple(group_index.shape)}")
    if run_index is None:
        stats = group_stats(rewards, group_index)
        return (stats.size == 1) | (stats.std <= std_threshold)
    order = torch.arange(rewards.shape[0], device=rewards.device)
    run, runs = group_inverse(run_index)
    last = order.new_full((runs,), -1).scatter_reduce(0, run, order, reduce="amax")
    stats = group_stats(rewards[last], group_index[last])
    skip_run = (stats.size == 1) | (stats.std <= std_threshold)
    return skip_run[run]


def kept_rows(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    *,
    std_threshold: float,
    duplicate_experiences: bool = False,
    run_index: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Return the indices (long, [K]) of the rows to keep after skipping groups (see :func:`skipped_groups`).

    Kept rows come first, in order. With ``duplicate_experiences`` (upstream's
    Polaris option), one random kept group (whole, in order) is appended per
    skipped group, so the number of groups is unchanged; nothing is appended
    when every group was skipped.
    """
    skipped = skipped_groups(rewards, group_index, std_threshold, run_index)
    kept = (~skipped).nonzero(as_tuple=True)[0]
    if not duplicate_experiences:
        return kept
    skipped_ids = torch.unique(group_index[skipped])
    kept_ids = torch.unique(group_index[kept])
    if skipped_ids.numel() == 0 or kept_ids.numel() == 0:
        return kept
    picks = torch.randint(0, kept_ids.numel(), (skipped_ids.numel(),), generator=generator, device=kept_ids.device)
    extra = [(group_index == kept_ids[p]).nonzero(as_tuple=True)[0] for p in picks.tolist()]
    return torch.cat([kept, *extra])
