"""Advantages as a reward minus a group baseline (no division by a standard deviation, except ``rec``'s option).

Each row is scored by :meth:`~trinity.algorithm.advantage.AdvantageInputs.sequence_rewards`:
its reward, less any KL penalty when the trainer gives token-level rewards
(upstream's trainer-side ``*_verl`` versions sum token rewards the same way,
so they are aliases here). As upstream, a group of one has baseline 0: its
advantage is its raw reward.
"""

from __future__ import annotations

import torch

from trinity.algorithm.advantage import AdvantageInputs
from trinity.algorithm.advantages.common import check_choice, spread
from trinity.algorithm.catalog import OPTION_CHOICES
from trinity.algorithm.groups import group_log_mean_exp, group_stats


def reinforce_advantages(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Return REINFORCE ``(advantages, returns)``: each row's score on its response tokens (no baseline)."""
    with torch.no_grad():
        return spread(inputs.sequence_rewards(), inputs)


def rloo_advantages(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Return RLOO ``(advantages, returns)``: ``s_i - mean(s_j for the other j of i's group)`` on every response token.

    ``s`` is each row's summed token rewards. A group of one keeps its score
    (upstream's baseline 0). Returns equal advantages and returns. Raises
    ValueError without ``group_index``.
    """
    group_index = inputs.require("group_index", "rloo")
    with torch.no_grad():
        scores = inputs.sequence_rewards()
        stats = group_stats(scores, group_index)
        others = (stats.total - scores) / (stats.size - 1).clamp(min=1)
        return spread(torch.where(stats.size > 1, scores - others, scores), inputs)


def _opmd(user: str, scores: torch.Tensor, inputs: AdvantageInputs, baseline: str, tau: float) -> torch.Tensor:
    group_index = inputs.require("group_index", user)
    check_choice(f"advantage function {user!r}", "opmd_baseline", baseline, OPTION_CHOICES["opmd_baseline"])
    stats = group_stats(scores, group_index)
    if baseline == "mean":
        group_baseline = stats.mean
    else:
        group_baseline = group_log_mean_exp(scores, group_index, tau)
    return scores - torch.where(stats.size > 1, group_baseline, torch.zeros_like(group_baseline))


def opmd_advantages(
    inputs: AdvantageInputs, *, opmd_baseline: str = "mean", tau: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return online-policy-mirror-descent ``(advantages, returns)``: ``s_i - b_group`` on every response token.

    The baseline of a group of n > 1 is its mean reward (``opmd_baseline="mean"``)
    or ``tau * log((1/n) sum_j exp(r_j / tau))`` (``"logavgexp"``); a group of
    one has baseline 0. Returns equal advantages and returns. Raises ValueError
    without ``group_index``, for an unknown baseline, or ``tau <= 0`` with ``logavgexp``.
    """
    with torch.no_grad():
        return spread(_opmd("opmd", inputs.sequence_rewards(), inputs, opmd_baseline, tau), inputs)


def _asymre(user: str, scores: torch.Tensor, inputs: AdvantageInputs, baseline_shift: float) -> torch.Tensor:
    stats = group_stats(scores, inputs.require("group_index", user))
    baseline = torch.where(stats.size > 1, stats.mean + baseline_shift, torch.zeros_like(stats.mean))
    return scores - baseline


def asymre_advantages(inputs: AdvantageInputs, *, baseline_shift: float = -0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """Return AsymRE ``(advantages, returns)``: ``s_i - (mean_group + baseline_shift)`` on every response token.

    A group of one has baseline 0. Returns equal advantages and returns. Raises
    ValueError without ``group_index``.
    """
    with torch.no_grad():
        return spread(_asymre("asymre", inputs.sequence_rewards(), inputs, baseline_shift), inputs)


def _balanced_keep(is_pos: torch.Tensor) -> torch.Tensor:
    """Return a [n] keep mask dropping random negatives until they are no more than the positives."""
    keep = torch.ones_like(is_pos)
    surplus = int((~is_pos).sum()) - int(is_pos.sum())
    if surplus > 0:
        negatives = (~is_pos).nonzero(as_tuple=True)[0]
        dropped = negatives[torch.randperm(negatives.numel(), device=negatives.device)[:surplus]]
        keep[dropped] = False
    return keep


def rec_advantages(
    inputs: AdvantageInputs, *, epsilon: float = 1e-6, std_normalize: bool = False, drop: str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return REC ``(advantages, returns)``: reward minus the group mean, optionally over the group std.

    With ``drop="balance"``, a group with more below-mean rewards than
    at-or-above-mean ones has random below-mean rows dropped (advantage 0) until
    both counts match, and the mean and *population* standard deviation are
    taken over the kept rows; a group with at most one kept row has mean 0 and
    std 1. ``std_normalize`` divides by ``std + epsilon``. Returns equal
    advantages and returns. Raises ValueError without ``group_index`` or for an
    unknown ``drop``.
    """
    group_index = inputs.require("group_index", "rec")
    check_choice("advantage function 'rec'", "drop", drop, OPTION_CHOICES["drop"])
    rewards = inputs.sequence_rewards()
    per_row = torch.zeros_like(rewards)
    with torch.no_grad():
        for group in torch.unique(group_index):
            rows = (group_index == group).nonzero(as_tuple=True)[0]
            values = rewards[rows]
            keep = torch.ones(rows.numel(), dtype=torch.bool, device=rows.device)
            if drop == "balance":
                keep = _balanced_keep(values >= values.mean())
            if int(keep.sum()) <= 1:
                mean, std = values.new_zeros(()), values.new_ones(())
            else:
                kept = values[keep]
                mean, std = kept.mean(), kept.std(unbiased=False)
            scores = (values - mean) / (std + epsilon) if std_normalize else values - mean
            per_row[rows] = torch.where(keep, scores, torch.zeros_like(scores))
        return spread(per_row, inputs)

